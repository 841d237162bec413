package s3_test

import (
	"bytes"
	"context"
	"sync"
	"testing"

	s3store "github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/internal/benchratio"
	"github.com/tflo-io/tflo/streaming"
)

// BenchmarkCheckpoint100k saves a checkpoint of 100,000 keys (SaveBatch)
// against gofakes3 and reports PUTs and request bytes per checkpoint,
// beside a baseline of one PutObject of the same total bytes through an
// identically built client (x-one-put-same-bytes: 1.0 means the store
// costs no more than uploading its bytes once).
func BenchmarkCheckpoint100k(b *testing.B) {
	for _, unsigned := range []bool{false, true} {
		name := "payload=signed"
		if unsigned {
			name = "payload=unsigned"
		}
		b.Run(name, func(b *testing.B) { benchCheckpoint(b, s3store.WithUnsignedPayload(unsigned)) })
	}
}

func benchCheckpoint(b *testing.B, opts ...s3store.Option) {
	ctx := context.Background()
	f := newFakeS3(b)
	items := batch(100_000, 1)
	st, rc := f.store(b, opts...)
	// One checkpoint outside the timer to size the baseline.
	if err := st.SaveBatch(ctx, items); err != nil {
		b.Fatal(err)
	}
	bytesPerCheckpoint := checkpointSize(b)
	timeSaves(b, st, rc, items)
	b.ReportMetric(float64(len(items)), "keys/op")
	stats, err := st.Stats(ctx)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(stats.RecordBytes), "record-bytes")

	if got := rc.BytesSent() / int64(b.N); got < bytesPerCheckpoint*99/100 || got > bytesPerCheckpoint*101/100 {
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

// baselineOneGet is one ranged GET of 4096 bytes (a read of a whole
// block bypasses the archive's block cache, so every iteration is a GET;
// a record is ~120 bytes).
func baselineOneGet(b *testing.B) {
	ctx := context.Background()
	f := newFakeS3(b)
	a, err := s3store.NewArchive(ctx, testBucket, f.opts(s3store.WithPrefix("baseline"), s3store.WithReadBlockSize(4096))...)
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
	buf := make([]byte, 4096)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := o.ReadAt(buf, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// baselineGetManifestSized is one GET of an object as large as a
// 100k-key manifest plus one ranged GET of a record: the requests a cold
// restore of one key makes, without the decoding.
func baselineGetManifestSized(b *testing.B) {
	ctx := context.Background()
	f := newFakeS3(b)
	st, _ := f.store(b, s3store.WithPrefix("size"))
	if err := st.SaveBatch(ctx, batch(100_000, 1)); err != nil {
		b.Fatal(err)
	}
	manifest := f.getObject(b, "size/manifest")
	a, err := s3store.NewArchive(ctx, testBucket, f.opts(s3store.WithPrefix("baseline"), s3store.WithReadBlockSize(4096))...)
	if err != nil {
		b.Fatal(err)
	}
	if err := a.PutAtomic(ctx, "manifest-sized", manifest); err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, len(manifest))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		o, err := a.Open(ctx, "manifest-sized")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := o.ReadAt(buf, 0); err != nil {
			b.Fatal(err)
		}
		if _, err := o.ReadAt(buf[:200], 1000); err != nil {
			b.Fatal(err)
		}
		o.Close()
	}
}

// BenchmarkColdLoad100k opens a Store over 100,000 keys and loads one key:
// the manifest GET and decode, then one ranged GET (a restore after a
// crash), beside baselineGetManifestSized.
func BenchmarkColdLoad100k(b *testing.B) {
	ctx := context.Background()
	f := newFakeS3(b)
	items := batch(100_000, 1)
	st, _ := f.store(b)
	if err := st.SaveBatch(ctx, items); err != nil {
		b.Fatal(err)
	}
	stores := make([]*s3store.Store, b.N)
	for i := range stores {
		stores[i], _ = f.store(b) // no request until the first call
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := stores[i].Load(ctx, items[i%len(items)].Key); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	benchratio.Report(b, "get-manifest-sized", baselineGetManifestSized)
}

// BenchmarkRestore100k restores a whole 100k-key shard with Scan (manifest
// GET, one GET per segment, decode every snapshot) beside
// baselineGetCheckpoint, the floor of any restore.
func BenchmarkRestore100k(b *testing.B) {
	ctx := context.Background()
	f := newFakeS3(b)
	items := batch(100_000, 1)
	st, _ := f.store(b)
	if err := st.SaveBatch(ctx, items); err != nil {
		b.Fatal(err)
	}
	stores := make([]*s3store.Store, b.N)
	for i := range stores {
		stores[i], _ = f.store(b)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		n := 0
		if err := stores[i].Scan(ctx, func([]byte, streaming.Snapshot) error { n++; return nil }); err != nil {
			b.Fatal(err)
		}
		if n != len(items) {
			b.Fatalf("scanned %d keys, want %d", n, len(items))
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(len(items)), "keys/op")
	benchratio.Report(b, "get-and-decode-snapshots", baselineGetCheckpoint)
}

// baselineGetCheckpoint is the floor of any restore: one GET of the
// snapshots' bytes through an identically built client, then
// streaming.UnmarshalSnapshot of each of the 100k snapshots.
func baselineGetCheckpoint(b *testing.B) {
	ctx := context.Background()
	f := newFakeS3(b)
	a, err := s3store.NewArchive(ctx, testBucket, f.opts(s3store.WithPrefix("baseline"))...)
	if err != nil {
		b.Fatal(err)
	}
	var blob []byte
	var lens []int
	for _, it := range batch(100_000, 1) {
		n := len(blob)
		blob = streaming.AppendSnapshot(blob, it.Snapshot)
		lens = append(lens, len(blob)-n)
	}
	if err := a.PutAtomic(ctx, "blob", blob); err != nil {
		b.Fatal(err)
	}
	o, err := a.Open(ctx, "blob")
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	buf := make([]byte, len(blob))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := o.ReadAt(buf, 0); err != nil {
			b.Fatal(err)
		}
		off := 0
		for _, n := range lens {
			if _, err := streaming.UnmarshalSnapshot(buf[off : off+n]); err != nil {
				b.Fatal(err)
			}
			off += n
		}
	}
}

// BenchmarkIncrementalCheckpoint saves 1,000 changed keys into a store of
// 100,000: still 2 PUTs, but the manifest (the whole key index) is
// rewritten each time, so it dominates the bytes. Beside one PUT of just
// the 1,000 snapshots' bytes, the ratio is that amplification's price.
func BenchmarkIncrementalCheckpoint(b *testing.B) {
	ctx := context.Background()
	f := newFakeS3(b)
	st, rc := f.store(b, s3store.WithCompaction(0, 0))
	if err := st.SaveBatch(ctx, batch(100_000, 1)); err != nil {
		b.Fatal(err)
	}
	changed := incrementalBatch()
	timeSaves(b, st, rc, changed)
	b.ReportMetric(float64(snapshotBytes(changed)), "snapshot-bytes/op")
	benchratio.Report(b, "one-put-changed-bytes", baselinePutChanged)
}

// timeSaves times b.N SaveBatch calls of items and reports the PUTs and
// request bytes each took.
func timeSaves(b *testing.B, st *s3store.Store, rc *s3store.RequestCounter, items []streaming.KeyedSnapshot) {
	ctx := context.Background()
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
}

func incrementalBatch() []streaming.KeyedSnapshot { return batch(100_000, 2)[50_000:51_000] }

func snapshotBytes(items []streaming.KeyedSnapshot) int {
	n := 0
	for _, it := range items {
		n += len(it.Key) + streaming.SnapshotEncodedLen(it.Snapshot)
	}
	return n
}

// baselinePutChanged is one PutObject of the 1,000 changed snapshots'
// bytes.
func baselinePutChanged(b *testing.B) {
	ctx := context.Background()
	f := newFakeS3(b)
	a, err := s3store.NewArchive(ctx, testBucket, f.opts(s3store.WithPrefix("baseline"))...)
	if err != nil {
		b.Fatal(err)
	}
	payload := make([]byte, snapshotBytes(incrementalBatch()))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := a.PutAtomic(ctx, "changed", payload); err != nil {
			b.Fatal(err)
		}
	}
}

func TestMain(m *testing.M) {
	benchratio.Main(m, benchratio.Baselines{
		"BenchmarkCheckpoint100k":        {"one-put-same-bytes": baselineOnePut},
		"BenchmarkLoadOne":               {"one-get-same-bytes": baselineOneGet},
		"BenchmarkColdLoad100k":          {"get-manifest-sized": baselineGetManifestSized},
		"BenchmarkRestore100k":           {"get-and-decode-snapshots": baselineGetCheckpoint},
		"BenchmarkIncrementalCheckpoint": {"one-put-changed-bytes": baselinePutChanged},
	})
}

// BenchmarkLoadOne is a warm Load of one key out of 100,000 (one ranged
// GET), beside a baseline of one ranged GetObject through an identically
// built client.
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
