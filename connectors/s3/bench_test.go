package s3_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

	s3store "github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/internal/benchratio"
)

// BenchmarkCheckpoint100k saves a checkpoint of 100,000 keys (SaveBatch)
// against gofakes3 and reports PUTs and request bytes per checkpoint,
// beside a baseline of one PutObject of the same total bytes through an
// identically built client (x-one-put-same-bytes: 1.0 means the store
// costs no more than uploading its bytes once).
func BenchmarkCheckpoint100k(b *testing.B) {
	ctx := context.Background()
	f := newFakeS3(b)
	items := batch(100_000, 1)
	st, rc := f.store(b)
	// One checkpoint outside the timer to size the baseline.
	if err := st.SaveBatch(ctx, items); err != nil {
		b.Fatal(err)
	}
	bytesPerCheckpoint := checkpointSize(b)
	rc.Reset()

	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := st.SaveBatch(ctx, items); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(rc.Count("PutObject"))/float64(b.N), "PUTs/op")
	b.ReportMetric(float64(rc.BytesSent())/float64(b.N), "req-bytes/op")
	b.ReportMetric(float64(len(items)), "keys/op")
	stats, err := st.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(stats.RecordBytes), "record-bytes")

	if got := rc.BytesSent() / int64(b.N); got != bytesPerCheckpoint {
		b.Logf("request bytes per checkpoint %d, baseline sized for %d", got, bytesPerCheckpoint)
	}
	benchratio.Report(b, "one-put-same-bytes", baselineOnePut)
}

var (
	checkpointOnce  sync.Once
	checkpointBytes int64
)

// checkpointSize is the request bytes of one 100k-key checkpoint, measured
// once per process.
func checkpointSize(tb testing.TB) int64 {
	checkpointOnce.Do(func() {
		f := newFakeS3(tb)
		st, rc := f.store(tb)
		if err := st.SaveBatch(context.Background(), batch(100_000, 1)); err != nil {
			tb.Fatal(err)
		}
		checkpointBytes = rc.BytesSent()
	})
	return checkpointBytes
}

// baselineOnePut is one PutObject of a checkpoint's bytes through a client
// built like the store's (same signing, same transport).
func baselineOnePut(b *testing.B) {
	ctx := context.Background()
	size := checkpointSize(b)
	f := newFakeS3(b)
	a, err := s3store.NewArchive(ctx, testBucket, f.opts(s3store.WithPrefix("baseline"))...)
	if err != nil {
		b.Fatal(err)
	}
	payload := bytes.Repeat([]byte("0123456789abcdef"), int(size/16)+1)[:size]
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := a.PutAtomic(ctx, "blob", payload); err != nil {
			b.Fatal(err)
		}
	}
}

// baselineOneGet is one ranged GET of 200 bytes (about one record).
func baselineOneGet(b *testing.B) {
	ctx := context.Background()
	f := newFakeS3(b)
	a, err := s3store.NewArchive(ctx, testBucket, f.opts(s3store.WithPrefix("baseline"))...)
	if err != nil {
		b.Fatal(err)
	}
	if err := a.PutAtomic(ctx, "small", bytes.Repeat([]byte("x"), 4096)); err != nil {
		b.Fatal(err)
	}
	o, err := a.Open(ctx, "small")
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	buf := make([]byte, 200)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := o.ReadAt(buf, 1000); err != nil {
			b.Fatal(err)
		}
	}
}

func TestMain(m *testing.M) {
	benchratio.Main(m, map[string]func(*testing.B){
		"one-put-same-bytes": baselineOnePut,
		"one-get-same-bytes": baselineOneGet,
	})
}

// BenchmarkLoadOne is a warm Load of one key out of 100,000 (one ranged
// GET), beside a baseline of one ranged GetObject of 200 bytes (about one
// record) through an identically built client.
func BenchmarkLoadOne(b *testing.B) {
	ctx := context.Background()
	f := newFakeS3(b)
	items := batch(100_000, 1)
	st, _ := f.store(b)
	if err := st.SaveBatch(ctx, items); err != nil {
		b.Fatal(err)
	}
	key := items[54321].Key
	if _, err := st.Load(ctx, key); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := st.Load(ctx, key); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	benchratio.Report(b, "one-get-same-bytes", baselineOneGet)
}
