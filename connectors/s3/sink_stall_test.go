package s3_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/parquet"
	s3store "github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/streaming"
)

// stallingS3 is gofakes3 behind a handler that holds UploadPart requests
// (PUT ...?partNumber=) until the client goes away or the test releases
// them: an S3 endpoint that stopped answering. stalled closes when the
// first is held; abandoned counts the held requests the client gave up.
func stallingS3(t *testing.T) (f *fakeS3, stalled <-chan struct{}, unstall func(), abandoned *atomic.Int64) {
	t.Helper()
	release, held := make(chan struct{}), make(chan struct{})
	var once, heldOnce sync.Once
	abandoned = new(atomic.Int64)
	f = newFakeS3Behind(t, func(fake http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut && r.URL.Query().Get("partNumber") != "" {
				// With the body read, the server notices the client leaving.
				body, err := io.ReadAll(r.Body)
				if err != nil {
					return
				}
				r.Body = io.NopCloser(bytes.NewReader(body))
				heldOnce.Do(func() { close(held) })
				select {
				case <-r.Context().Done():
					abandoned.Add(1)
					return
				case <-release:
				}
			}
			fake.ServeHTTP(w, r)
		})
	})
	unstall = func() { once.Do(func() { close(release) }) }
	t.Cleanup(unstall)
	return f, held, unstall, abandoned
}

func sinkOuts(epoch streaming.Epoch, off int64) []streaming.Output {
	sh := streaming.KafkaShard("readings", 0)
	var outs []streaming.Output
	for _, r := range rowsAtOffset(off) {
		o := r.Output()
		o.Shard, o.Epoch = sh, epoch
		outs = append(outs, o)
	}
	return outs
}

// TestArchiveSinkGivesUpOnStalledUpload: when the S3 endpoint stops
// answering part uploads, the archive sink's background append hangs, and
// what waits for it gives up with its own context: a Write waiting for
// room whose context ends (the shard is released, the worker stops), a
// checkpoint's Flush at its deadline, and Close, which cancels the
// background append. Before, all three waited for the endpoint.
func TestArchiveSinkGivesUpOnStalledUpload(t *testing.T) {
	f, stalled, unstall, _ := stallingS3(t)
	a, err := s3store.NewArchive(context.Background(), testBucket, f.opts(s3store.WithPrefix("archive"), s3store.WithMinPartSize(1))...)
	require.NoError(t, err)
	const groupRows = 32
	s, err := parquet.NewSink(a, "plant", parquet.WithRowGroupRows(groupRows), parquet.WithPartSize(1))
	require.NoError(t, err)
	sh := streaming.KafkaShard("readings", 0)
	require.NoError(t, s.Restore(context.Background(), sh, 1, streaming.RestoredCut{Offset: -1}))

	ctx, cancel := context.WithCancel(context.Background())
	writeDone := make(chan error, 1)
	var written atomic.Int64
	go func() {
		for off := int64(0); ; off++ {
			written.Store(off)
			if err := s.Write(ctx, sinkOuts(1, off)); err != nil {
				writeDone <- err
				return
			}
			if ctx.Err() != nil {
				writeDone <- ctx.Err()
				return
			}
		}
	}()
	// The first part upload stalls; Writes go on until the held rows hit
	// their bound, then wait. The shard stops: its context is cancelled.
	select {
	case <-stalled:
	case <-time.After(20 * time.Second):
		t.Fatal("no part upload reached the endpoint")
	}
	last := int64(-1)
	require.Eventually(t, func() bool {
		n := written.Load()
		// The bound is 4*groupRows rows held, at most 2 rows an offset.
		stuck := n == last && n > 2*groupRows
		last = n
		return stuck
	}, 20*time.Second, 200*time.Millisecond, "Writes stop once the held rows reach their bound")
	cancel()

	hung := false
	select {
	case <-writeDone:
	case <-time.After(10 * time.Second):
		hung = true
		t.Error("Write ignores its cancelled context: still blocked 10s after the cancel")
	}

	fctx, fcancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer fcancel()
	flushDone := make(chan error, 1)
	go func() { flushDone <- s.Flush(fctx, sh, 1) }()
	select {
	case err := <-flushDone:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		hung = true
		t.Error("Flush ignores its 500ms deadline: still blocked after 10s")
	}

	closeDone := make(chan error, 1)
	cctx, ccancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer ccancel()
	go func() { closeDone <- s.Close(cctx) }()
	select {
	case <-closeDone:
	case <-time.After(10 * time.Second):
		hung = true
		t.Error("Close ignores its 500ms deadline: still blocked after 10s")
	}
	unstall() // let the goroutines end
	if hung {
		<-writeDone
		<-flushDone
		<-closeDone
	}
}

// TestArchiveSinkRestoreStopsTheOldEpochsUpload: the shard is gained again
// (epoch 2) while its epoch-1 writer's background upload hangs. Restore
// replaced the writer without stopping that upload, which went on beside
// the new epoch's restore (staging objects the restore never saw); now the
// restore cancels it and waits for it first.
func TestArchiveSinkRestoreStopsTheOldEpochsUpload(t *testing.T) {
	f, stalled, _, abandoned := stallingS3(t)
	a, err := s3store.NewArchive(context.Background(), testBucket, f.opts(s3store.WithPrefix("archive"), s3store.WithMinPartSize(1))...)
	require.NoError(t, err)
	s, err := parquet.NewSink(a, "plant", parquet.WithRowGroupRows(32), parquet.WithPartSize(1))
	require.NoError(t, err)
	defer s.Close(context.Background())
	sh := streaming.KafkaShard("readings", 0)
	ctx := context.Background()
	require.NoError(t, s.Restore(ctx, sh, 1, streaming.RestoredCut{Offset: -1}))
	// Epoch 1's hot path writes until the held rows reach their bound
	// behind the hung upload, then stops (its context is cancelled).
	wctx, stopWriting := context.WithCancel(ctx)
	writeDone := make(chan struct{})
	go func() {
		defer close(writeDone)
		for off := int64(0); s.Write(wctx, sinkOuts(1, off)) == nil; off++ {
		}
	}()
	select {
	case <-stalled:
	case <-time.After(20 * time.Second):
		t.Fatal("no part upload reached the endpoint")
	}
	stopWriting()
	<-writeDone
	require.Zero(t, abandoned.Load())

	require.NoError(t, s.Restore(ctx, sh, 2, streaming.RestoredCut{Offset: -1}))
	require.Eventually(t, func() bool { return abandoned.Load() > 0 }, 10*time.Second, 10*time.Millisecond,
		"the epoch-1 upload still hangs after the shard was restored at epoch 2")
	require.NoError(t, s.Write(ctx, sinkOuts(2, 0)), "the new epoch's writer works")
}
