package parquet_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/streaming"
)

// outsAt are the outputs of the record at off of partition part at epoch:
// the rows rowsAt(off) as a pipeline writes them.
func outsAt(part int32, epoch streaming.Epoch, off int64) []streaming.Output {
	sh := streaming.KafkaShard("readings", part)
	var outs []streaming.Output
	for _, r := range rowsAt(off) {
		o := r.Output()
		o.Shard, o.Epoch = sh, epoch
		outs = append(outs, o)
	}
	return outs
}

func writeRange(t *testing.T, s *parquet.Sink, part int32, epoch streaming.Epoch, from, to int64) {
	t.Helper()
	for off := from; off <= to; off++ {
		require.NoError(t, s.Write(context.Background(), outsAt(part, epoch, off)))
	}
}

// The archive sink runs one rolling writer per shard in step with the
// shard's checkpoints: a checkpoint pre-commits exactly the rows its cut
// contains (not those written between the cut and the Flush), nothing is
// visible before the file is finished and committed, and a roll before
// the final checkpoint publishes every row once. Commit reports the rows
// the checkpoints made durable.
func TestSinkCheckpointsCoverTheirCut(t *testing.T) {
	ctx := context.Background()
	a := parquet.NewMemArchive()
	s, err := parquet.NewSink(a, "plant", parquet.WithRowGroupRows(64))
	require.NoError(t, err)
	sh0, sh1 := streaming.KafkaShard("readings", 0), streaming.KafkaShard("readings", 1)
	require.ErrorContains(t, s.Write(ctx, outsAt(0, 7, 0)), "not restored", "a Write before the shard's Restore")
	for _, sh := range []streaming.ShardID{sh0, sh1} {
		require.NoError(t, s.Restore(ctx, sh, 7, streaming.RestoredCut{Offset: -1}))
	}
	require.ErrorContains(t, s.Write(ctx, outsAt(0, 6, 0)), "epoch 6", "outputs of another epoch")

	writeRange(t, s, 0, 7, 0, 99)
	writeRange(t, s, 1, 7, 0, 9)
	s.MarkCut(sh0, 99)
	writeRange(t, s, 0, 7, 100, 149) // after the cut, before its pre-commit
	require.NoError(t, s.Flush(ctx, sh0, 1))
	st, err := s.CommitCheckpoint(ctx, sh0, 1)
	require.NoError(t, err)
	require.Equal(t, int64(len(rowsThrough(100))), st.Rows, "checkpoint 1 commits the rows its cut contains, not the later ones")
	require.Positive(t, st.Bytes)
	require.Empty(t, st.Files, "the open file is not finished at every checkpoint")
	require.Empty(t, visibleFiles(t, a))

	s.MarkCut(sh0, 149)
	s.Roll(sh0)
	require.NoError(t, s.Flush(ctx, sh0, 2))
	st, err = s.CommitCheckpoint(ctx, sh0, 2)
	require.NoError(t, err)
	require.Equal(t, int64(len(rowsThrough(150))-len(rowsThrough(100))), st.Rows)
	require.Equal(t, []parquet.FileKey{{Pipeline: "plant", Shard: 0, Epoch: 7, First: 0, Last: 149}}, st.Files)

	// Shard 1 is untouched by shard 0's checkpoints; a commit of a
	// checkpoint it never pre-committed commits nothing.
	st, err = s.CommitCheckpoint(ctx, sh1, 2)
	require.NoError(t, err)
	require.Zero(t, st.Rows)
	exactlyOnce(t, arrowReadArchive(t, a), map[int32][]parquet.Row{0: rowsThrough(150)})
	require.NoError(t, s.Close(ctx))
}

// A new owner restoring the shard from its last committed checkpoint
// discards what the dead owner pre-committed after it (a checkpoint whose
// state never committed) and what it wrote past any cut; the replayed
// records are archived once, and an independent reader sees every row
// exactly once.
func TestSinkRestoreDiscardsPastTheCheckpoint(t *testing.T) {
	ctx := context.Background()
	la, err := parquet.NewLocalArchive(t.TempDir())
	require.NoError(t, err)
	sh := streaming.KafkaShard("readings", 3)
	opts := []parquet.WriterOption{parquet.WithRowGroupRows(50), parquet.WithTargetFileSize(16 << 10), parquet.WithPartSize(4 << 10)}

	old, err := parquet.NewSink(la, "plant", opts...)
	require.NoError(t, err)
	require.NoError(t, old.Restore(ctx, sh, 1, streaming.RestoredCut{Offset: -1}))
	writeRange(t, old, 3, 1, 0, 999)
	old.MarkCut(sh, 999)
	require.NoError(t, old.Flush(ctx, sh, 1))
	require.NoError(t, old.Commit(ctx, sh, 1))
	// Checkpoint 2 pre-commits, but its state never commits: the owner dies.
	writeRange(t, old, 3, 1, 1000, 1499)
	old.MarkCut(sh, 1499)
	require.NoError(t, old.Flush(ctx, sh, 2))
	writeRange(t, old, 3, 1, 1500, 1599)
	// The owner dies here: nothing of it writes any more (its background
	// append of the rows above ends).
	require.NoError(t, old.Close(ctx))

	next, err := parquet.NewSink(la, "plant", opts...)
	require.NoError(t, err)
	rs, err := next.RestoreShard(ctx, sh, 2, streaming.RestoredCut{ID: 1, Epoch: 1, Offset: 999})
	require.NoError(t, err)
	require.Positive(t, rs.Discarded, "checkpoint 2's pre-commit must be discarded")
	writeRange(t, next, 3, 2, 1000, 1999) // the source replays after the cut
	next.MarkCut(sh, 1999)
	next.Roll(sh)
	require.NoError(t, next.Flush(ctx, sh, 2))
	require.NoError(t, next.Commit(ctx, sh, 2))

	exactlyOnce(t, arrowReadArchive(t, la), map[int32][]parquet.Row{3: rowsThrough(2000)})
}

// Writes run on the shard's goroutine while its checkpoints mark, flush
// and commit on another: rows written while a pre-commit or a commit uses
// the writer are held and appended after, and every row ends up archived
// exactly once.
func TestSinkWritesDuringCheckpoints(t *testing.T) {
	ctx := context.Background()
	la, err := parquet.NewLocalArchive(t.TempDir())
	require.NoError(t, err)
	s, err := parquet.NewSink(la, "race", parquet.WithRowGroupRows(32), parquet.WithTargetFileSize(8<<10), parquet.WithPartSize(1<<10))
	require.NoError(t, err)
	sh := streaming.KafkaShard("readings", 0)
	require.NoError(t, s.Restore(ctx, sh, 1, streaming.RestoredCut{Offset: -1}))
	const n = 3000
	var (
		mu   sync.Mutex // the shard lock: a cut never falls inside a Write
		last = int64(-1)
		wg   sync.WaitGroup
	)
	stop := make(chan struct{})
	wg.Go(func() {
		id := streaming.CheckpointID(0)
		for {
			select {
			case <-stop:
				return
			default:
			}
			id++
			mu.Lock()
			s.MarkCut(sh, last)
			mu.Unlock()
			require.NoError(t, s.Flush(ctx, sh, id))
			require.NoError(t, s.Commit(ctx, sh, id))
		}
	})
	for off := int64(0); off < n; off++ {
		mu.Lock()
		require.NoError(t, s.Write(ctx, outsAt(0, 1, off)))
		last = off
		mu.Unlock()
	}
	close(stop)
	wg.Wait()
	s.MarkCut(sh, n-1)
	s.Roll(sh)
	require.NoError(t, s.Flush(ctx, sh, 1<<40))
	require.NoError(t, s.Commit(ctx, sh, 1<<40))

	exactlyOnce(t, arrowReadArchive(t, la), map[int32][]parquet.Row{0: rowsThrough(n)})
}

// gatedArchive is a MemArchive whose part uploads wait for open.
type gatedArchive struct {
	*parquet.MemArchive
	open    chan struct{}
	waiting chan struct{} // closed when an upload first waits
	once    sync.Once
}

func (g *gatedArchive) UploadPart(ctx context.Context, name, id string, n int, off int64, data []byte) (parquet.Part, error) {
	g.once.Do(func() { close(g.waiting) })
	<-g.open
	return g.MemArchive.UploadPart(ctx, name, id, n, off, data)
}

// A Write whose rows make the writer encode a row group (and upload a
// part) returns before the upload does: the append runs off the shard's
// goroutine, the rows written meanwhile are held. Held rows are bounded:
// once the background append is four row groups behind, Writes wait for
// it. Every row is archived once when the upload goes on.
func TestSinkAppendsOffTheHotPath(t *testing.T) {
	ctx := context.Background()
	a := &gatedArchive{MemArchive: parquet.NewMemArchive(), open: make(chan struct{}), waiting: make(chan struct{})}
	const groupRows = 32
	s, err := parquet.NewSink(a, "plant", parquet.WithRowGroupRows(groupRows), parquet.WithPartSize(1))
	require.NoError(t, err)
	sh := streaming.KafkaShard("readings", 0)
	require.NoError(t, s.Restore(ctx, sh, 1, streaming.RestoredCut{Offset: -1}))

	const n = 2000 // far more rows than four row groups
	done := make(chan struct{})
	var written atomic.Int64
	go func() {
		defer close(done)
		for off := int64(0); off < n; off++ {
			if err := s.Write(ctx, outsAt(0, 1, off)); err != nil {
				t.Error(err)
				return
			}
			written.Store(off + 1)
		}
	}()
	select {
	case <-a.waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("no part upload started")
	}
	// The upload waits; Writes go on until four row groups are held.
	require.Eventually(t, func() bool { return s.HeldRows(sh) >= 4*groupRows }, 10*time.Second, time.Millisecond)
	require.Positive(t, written.Load(), "a Write returned while the upload waits")
	select {
	case <-done:
		t.Fatal("every Write returned while the append was blocked: held rows are unbounded")
	default:
	}
	require.LessOrEqual(t, s.HeldRows(sh), 4*groupRows+len(rowsAt(0))*2, "held rows stay bounded")

	close(a.open)
	<-done
	s.MarkCut(sh, n-1)
	s.Roll(sh)
	require.NoError(t, s.Flush(ctx, sh, 1))
	require.NoError(t, s.Commit(ctx, sh, 1))
	require.NoError(t, s.Close(ctx))
	exactlyOnce(t, arrowReadArchive(t, a.MemArchive), map[int32][]parquet.Row{0: rowsThrough(n)})
}

// A cut whose rows make the writer encode a row group (and upload a part)
// returns before the upload does. MarkCut runs under the shard's lock, so
// an upload there holds the shard's records and its release for as long
// as the archive takes to answer. Here the earlier cut's pre-commit never
// came (a failed checkpoint), so the rows held since go to the writer at
// the next cut; every row is archived once when the upload goes on. Bug:
// MarkCut uploaded them itself, waiting for the archive.
func TestSinkMarkCutDoesNotWaitForTheArchive(t *testing.T) {
	ctx := context.Background()
	a := &gatedArchive{MemArchive: parquet.NewMemArchive(), open: make(chan struct{}), waiting: make(chan struct{})}
	const groupRows = 32
	s, err := parquet.NewSink(a, "plant", parquet.WithRowGroupRows(groupRows), parquet.WithPartSize(1))
	require.NoError(t, err)
	sh := streaming.KafkaShard("readings", 0)
	require.NoError(t, s.Restore(ctx, sh, 1, streaming.RestoredCut{Offset: -1}))

	writeRange(t, s, 0, 1, 0, 1)
	s.MarkCut(sh, 1) // its pre-commit never comes
	const n = 4 * groupRows
	writeRange(t, s, 0, 1, 2, n-1) // held after the cut: more than a row group
	require.GreaterOrEqual(t, s.HeldRows(sh), groupRows)
	marked := make(chan struct{})
	go func() {
		defer close(marked)
		s.MarkCut(sh, n-1)
	}()
	select {
	case <-marked:
	case <-time.After(10 * time.Second):
		t.Fatal("MarkCut waits for the archive's upload")
	}

	close(a.open)
	s.Roll(sh)
	require.NoError(t, s.Flush(ctx, sh, 1))
	require.NoError(t, s.Commit(ctx, sh, 1))
	require.NoError(t, s.Close(ctx))
	exactlyOnce(t, arrowReadArchive(t, a.MemArchive), map[int32][]parquet.Row{0: rowsThrough(n)})
}

// armedGate is a MemArchive whose part uploads, once armed, pass skip
// more and then wait for open.
type armedGate struct {
	*parquet.MemArchive
	skip    atomic.Int64 // uploads still let through once armed; <0: not armed
	open    chan struct{}
	waiting chan struct{} // closed when an upload first waits
	once    sync.Once
}

func (g *armedGate) UploadPart(ctx context.Context, name, id string, n int, off int64, data []byte) (parquet.Part, error) {
	if g.skip.Load() >= 0 && g.skip.Add(-1) < 0 {
		g.once.Do(func() { close(g.waiting) })
		<-g.open
	}
	return g.MemArchive.UploadPart(ctx, name, id, n, off, data)
}

// TestSinkFlushDoesNotWaitForRowsAfterItsCut: a checkpoint's Flush
// appended the rows written after its cut (held while it pre-committed)
// before it returned, uploads included: the checkpoint waited for the
// archive to take rows it does not cover, and under a shard that kept
// writing, for as long as the writes went on. Those rows now go to the
// background append; Flush returns once its cut is durable.
func TestSinkFlushDoesNotWaitForRowsAfterItsCut(t *testing.T) {
	ctx := context.Background()
	a := &armedGate{MemArchive: parquet.NewMemArchive(), open: make(chan struct{}), waiting: make(chan struct{})}
	a.skip.Store(-1)
	const groupRows = 32
	s, err := parquet.NewSink(a, "plant", parquet.WithRowGroupRows(groupRows), parquet.WithPartSize(1))
	require.NoError(t, err)
	sh := streaming.KafkaShard("readings", 0)
	require.NoError(t, s.Restore(ctx, sh, 1, streaming.RestoredCut{Offset: -1}))

	writeRange(t, s, 0, 1, 0, 9)
	s.MarkCut(sh, 9)
	const n = 4 * groupRows
	writeRange(t, s, 0, 1, 10, n-1) // after the cut: held, more than a row group
	require.GreaterOrEqual(t, s.HeldRows(sh), groupRows)
	a.skip.Store(1) // the pre-commit's upload passes; the next one, of rows after the cut, waits
	flushed := make(chan error, 1)
	go func() { flushed <- s.Flush(ctx, sh, 1) }()
	select {
	case err := <-flushed:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Flush waits for the upload of rows written after its cut")
	}
	select {
	case <-a.waiting: // the rows after the cut are being appended
	case <-time.After(10 * time.Second):
		t.Fatal("the rows after the cut are not appended")
	}
	close(a.open)
	st, err := s.CommitCheckpoint(ctx, sh, 1)
	require.NoError(t, err)
	require.Equal(t, int64(len(rowsThrough(10))), st.Rows, "checkpoint 1 covers its cut only")

	s.MarkCut(sh, n-1)
	s.Roll(sh)
	require.NoError(t, s.Flush(ctx, sh, 2))
	require.NoError(t, s.Commit(ctx, sh, 2))
	require.NoError(t, s.Close(ctx))
	exactlyOnce(t, arrowReadArchive(t, a.MemArchive), map[int32][]parquet.Row{0: rowsThrough(n)})
}
