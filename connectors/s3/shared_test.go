package s3_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"iter"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	s3store "github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
)

// counterSource is a shard's hot state for the checkpointer: a count of
// records, cut as one piece; the cursor is the count. It merges runs, so
// checkpoints also delete the pieces of older runs.
type counterSource struct {
	mu sync.Mutex
	n  uint64
}

func (s *counterSource) add() {
	s.mu.Lock()
	s.n++
	s.mu.Unlock()
}

func (s *counterSource) Cut(context.Context) (streaming.Cut, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return counterCut(s.n), nil
}

func (s *counterSource) Restore(_ context.Context, _ string, cursor []byte, pieces iter.Seq2[[]byte, error]) error {
	for p, err := range pieces {
		if err != nil {
			return err
		}
		_ = p
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n = 0
	if len(cursor) == 8 {
		s.n = binary.BigEndian.Uint64(cursor)
	}
	return nil
}

// MergeRuns keeps the newest piece: the count is the whole state.
func (s *counterSource) MergeRuns(_ context.Context, runs []iter.Seq2[[]byte, error], emit func([]byte) error) error {
	var last []byte
	for _, run := range runs {
		for p, err := range run {
			if err != nil {
				return err
			}
			last = append(last[:0], p...)
		}
	}
	return emit(last)
}

type counterCut uint64

func (c counterCut) Cursor() (string, []byte) {
	return "count", binary.BigEndian.AppendUint64(nil, uint64(c))
}

func (c counterCut) Pieces(_ context.Context, emit func([]byte) error) error {
	return emit(fmt.Appendf(nil, "count=%d", uint64(c)))
}

func (counterCut) Release(bool) {}

// sharedPrefixWriters is issue 16.1: workers sharing one S3 prefix
// collided on its single manifest (HTTP 412, "manifest changed by another
// writer"), which the checkpoint activities turned into NotOwner, and a
// partition stopped checkpointing for good. Each writer here is its own
// Store (a separate worker) checkpointing its own shards with a real
// streaming.Checkpointer, all at once on one prefix: every checkpoint of
// every shard must succeed, and a fresh Store restores each shard's last
// one.
func sharedPrefixWriters(t *testing.T, writers, shardsPerWriter, rounds int, open func(t *testing.T) *s3store.Store) {
	t.Helper()
	ctx := context.Background()
	shard := func(w, i int) string { return fmt.Sprintf("kafka/central/readings/%d", w*shardsPerWriter+i) }
	counts := make([][]int, writers)
	errs := make(chan error, writers*shardsPerWriter*rounds)
	var wg sync.WaitGroup
	for w := range writers {
		counts[w] = make([]int, shardsPerWriter)
		store := open(t)
		cursors := memory.New()
		wg.Go(func() {
			type sh struct {
				src *counterSource
				cp  *streaming.Checkpointer
			}
			var shards []sh
			for i := range shardsPerWriter {
				src := &counterSource{}
				cp, err := streaming.NewCheckpointer(shard(w, i), src, store, cursors, streaming.WithMaxRuns(3))
				if err != nil {
					errs <- err
					return
				}
				shards = append(shards, sh{src, cp})
			}
			for range rounds {
				for i, s := range shards {
					s.src.add()
					if _, err := s.cp.Checkpoint(ctx); err != nil {
						errs <- fmt.Errorf("writer %d shard %s: %w", w, shard(w, i), err)
						continue
					}
					counts[w][i]++
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	var failed []error
	for err := range errs {
		failed = append(failed, err)
	}
	if len(failed) > 0 {
		t.Fatalf("%d checkpoints refused, the first: %v", len(failed), failed[0])
	}
	for w := range writers {
		for i := range shardsPerWriter {
			require.Equal(t, rounds, counts[w][i], "checkpoints of shard %s", shard(w, i))
		}
	}
	// A fresh worker restores every shard at its last checkpoint.
	fresh := open(t)
	for w := range writers {
		for i := range shardsPerWriter {
			src := &counterSource{}
			cp, err := streaming.NewCheckpointer(shard(w, i), src, fresh, memory.New())
			require.NoError(t, err)
			info, err := cp.Restore(ctx)
			require.NoError(t, err)
			require.Equal(t, streaming.CheckpointID(rounds), info.ID, "shard %s", shard(w, i))
			require.Equal(t, uint64(rounds), src.n, "shard %s", shard(w, i))
		}
	}
	stats, err := fresh.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, writers*shardsPerWriter, stats.Shards, "one manifest per shard")
}

func TestSharedPrefixCheckpoints(t *testing.T) {
	for _, writers := range []int{2, 3} {
		t.Run(fmt.Sprintf("gofakes3 %d writers", writers), func(t *testing.T) {
			f := newFakeS3(t)
			sharedPrefixWriters(t, writers, 2, 25, func(t *testing.T) *s3store.Store {
				st, _ := f.store(t, s3store.WithPrefix("central"))
				return st
			})
		})
	}
}

// A bucket written before shards had manifests of their own (every key in
// the root manifest, as WithShardOf(nil) still writes) is read by the new
// layout: a shard restores from the root manifest, checkpoints into its
// own, and the old pieces it drops are removed from the root one.
func TestSharedPrefixReadsRootLayout(t *testing.T) {
	f := newFakeS3(t)
	ctx := context.Background()
	const shard = "kafka/central/readings/4"
	old, _ := f.store(t, s3store.WithPrefix("central"), s3store.WithShardOf(nil))
	src := &counterSource{}
	cp, err := streaming.NewCheckpointer(shard, src, old, memory.New())
	require.NoError(t, err)
	for range 3 {
		src.add()
		_, err := cp.Checkpoint(ctx)
		require.NoError(t, err)
	}
	require.Empty(t, f.objectNames(t, "central/shards/"), "the old layout has one manifest")
	oldKeys, err := old.ListKeys(ctx)
	require.NoError(t, err)
	require.Len(t, oldKeys, 4, "the manifest and three pieces")

	st, _ := f.store(t, s3store.WithPrefix("central"))
	src = &counterSource{}
	cp, err = streaming.NewCheckpointer(shard, src, st, memory.New(), streaming.WithMaxRuns(2))
	require.NoError(t, err)
	info, err := cp.Restore(ctx)
	require.NoError(t, err)
	require.Equal(t, streaming.CheckpointID(3), info.ID)
	require.Equal(t, uint64(3), src.n)
	for range 3 {
		src.add()
		_, err := cp.Checkpoint(ctx)
		require.NoError(t, err)
	}
	require.NotEmpty(t, f.objectNames(t, "central/shards/"), "the shard has its own manifest now")
	require.NoError(t, old.Refresh(ctx))
	rootKeys, err := old.ListKeys(ctx) // the root manifest only
	require.NoError(t, err)
	require.Len(t, rootKeys, 1, "merged pieces left the root manifest; its stale checkpoint manifest stays: %q", rootKeys)

	fresh, _ := f.store(t, s3store.WithPrefix("central"))
	src = &counterSource{}
	cp, err = streaming.NewCheckpointer(shard, src, fresh, memory.New())
	require.NoError(t, err)
	info, err = cp.Restore(ctx)
	require.NoError(t, err)
	require.Equal(t, streaming.CheckpointID(6), info.ID, "the shard's own manifest wins over the root one")
	require.Equal(t, uint64(6), src.n)
	keys, err := fresh.ListKeys(ctx)
	require.NoError(t, err)
	seen := map[string]int{}
	for _, k := range keys {
		seen[string(k)]++
		require.Equal(t, 1, seen[string(k)], "key %q listed twice", k)
	}
}

// spreadSource is counterSource cut into several pieces a checkpoint: a
// merge of its runs replaces many pieces at once.
type spreadSource struct {
	counterSource
	pieces int
}

func (s *spreadSource) Cut(context.Context) (streaming.Cut, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return spreadCut{counterCut(s.n), s.pieces}, nil
}

// MergeRuns keeps the newest run: each run is the whole count.
func (s *spreadSource) MergeRuns(_ context.Context, runs []iter.Seq2[[]byte, error], emit func([]byte) error) error {
	var last [][]byte
	for _, run := range runs {
		var pieces [][]byte
		for p, err := range run {
			if err != nil {
				return err
			}
			pieces = append(pieces, append([]byte(nil), p...))
		}
		if len(pieces) > 0 {
			last = pieces
		}
	}
	for _, p := range last {
		if err := emit(p); err != nil {
			return err
		}
	}
	return nil
}

type spreadCut struct {
	counterCut
	pieces int
}

func (c spreadCut) Pieces(_ context.Context, emit func([]byte) error) error {
	for i := range c.pieces {
		if err := emit(fmt.Appendf(nil, "count=%d part=%d", uint64(c.counterCut), i)); err != nil {
			return err
		}
	}
	return nil
}

// The pieces a checkpoint's merge replaces are deleted in one commit
// (KeyDeleter): the checkpointer deleted them one Delete each, every one
// a rewrite of the shard's whole manifest (one PUT per piece, against
// "never one PUT per key"), within the few seconds it gives the deletes
// and stopping at the first failure, after which the rest stayed named
// by the manifest for good.
func TestCheckpointMergeDropsPiecesInOneCommit(t *testing.T) {
	ctx := context.Background()
	f := newFakeS3(t)
	st, rc := f.store(t)
	const pieces = 20
	src := &spreadSource{pieces: pieces}
	cp, err := streaming.NewCheckpointer("kafka/p/readings/0", src, st, memory.New(), streaming.WithMaxRuns(2))
	require.NoError(t, err)
	for range 2 {
		src.add()
		_, err := cp.Checkpoint(ctx)
		require.NoError(t, err)
	}
	before, err := st.ListKeys(ctx)
	require.NoError(t, err)
	require.Len(t, before, 1+2*pieces, "the manifest and two runs")

	rc.Reset()
	src.add()
	res, err := cp.Checkpoint(ctx) // three runs: merged into one
	require.NoError(t, err)
	require.Equal(t, 1, cp.Status().Runs)
	require.Equal(t, 2*pieces, res.Pieces, "its run and the merged one")
	// Its run (segment, manifest), the merged run (segment, manifest),
	// the checkpoint manifest (segment, manifest), and one commit
	// deleting the 3×20 replaced pieces.
	require.Equal(t, int64(7), rc.Count("PutObject"), "requests: %v", rc.Counts())

	after, err := st.ListKeys(ctx)
	require.NoError(t, err)
	require.Len(t, after, 1+pieces, "the manifest and the merged run: %q", after)
	for _, k := range before {
		if string(k) != string(streaming.CheckpointManifestKey("kafka/p/readings/0")) {
			_, err := st.Load(ctx, k)
			require.ErrorIs(t, err, streaming.ErrNotFound, "replaced piece %q", k)
		}
	}

	src2 := &spreadSource{pieces: pieces}
	cp2, err := streaming.NewCheckpointer("kafka/p/readings/0", src2, st, memory.New())
	require.NoError(t, err)
	info, err := cp2.Restore(ctx)
	require.NoError(t, err)
	require.Equal(t, res.ID, info.ID)
	require.Equal(t, uint64(3), src2.n)
}

// A worker regaining a shard it held before restores the shard's newest
// checkpoint, which another worker wrote meanwhile: the Store's cached
// manifest of the shard still named its own older checkpoint manifest,
// in a segment that compaction had shared with live pieces (so it was
// never deleted and the ranged GET found it), and Restore silently went
// back to that checkpoint.
func TestRestoreAfterAnotherWorkerReadsTheNewestCheckpoint(t *testing.T) {
	ctx := context.Background()
	v := startVersitygw(t, "state")
	open := func(extra ...s3store.Option) *s3store.Store {
		st, err := s3store.New(ctx, "state", v.opts(extra...)...)
		require.NoError(t, err)
		return st
	}
	const shard = "kafka/p/readings/0"
	// Compaction after every commit, so the checkpoint manifest shares
	// its segment with pieces that stay live.
	w1 := open(s3store.WithMaxSegments(2), s3store.WithCompaction(0.3, 1))
	src := &counterSource{}
	cp, err := streaming.NewCheckpointer(shard, src, w1, memory.New(), streaming.WithMaxRuns(100))
	require.NoError(t, err)
	for range 3 {
		src.add()
		_, err := cp.Checkpoint(ctx)
		require.NoError(t, err)
	}

	// The shard moves to another worker, which checkpoints it.
	w2 := open()
	src2 := &counterSource{}
	cp2, err := streaming.NewCheckpointer(shard, src2, w2, memory.New(), streaming.WithMaxRuns(100))
	require.NoError(t, err)
	info, err := cp2.Restore(ctx)
	require.NoError(t, err)
	require.Equal(t, streaming.CheckpointID(3), info.ID)
	src2.add()
	res, err := cp2.Checkpoint(ctx)
	require.NoError(t, err)

	// And back to the first worker's Store.
	src3 := &counterSource{}
	cp3, err := streaming.NewCheckpointer(shard, src3, w1, memory.New())
	require.NoError(t, err)
	info, err = cp3.Restore(ctx)
	require.NoError(t, err)
	require.Equal(t, res.ID, info.ID, "the shard's newest checkpoint, not this Store's cached one")
	require.Equal(t, uint64(4), src3.n)
}

// A zombie owner's checkpoint is fenced by the newer owner's manifest
// even when the zombie's Store cached the shard's manifest before the
// newer owner committed: the checkpointer's fence read the cache, and
// without conditional writes (WithConditionalWrites(false)) nothing else
// refused the zombie — a checkpoint that wrote no piece (nothing changed)
// replaced the newer owner's checkpoint manifest with an older epoch's.
func TestZombieCheckpointIsFencedThroughACachedManifest(t *testing.T) {
	ctx := context.Background()
	v := startVersitygw(t, "state")
	const shard = "kafka/p/readings/0"
	open := func(epoch streaming.Epoch, extra ...s3store.Option) (*streaming.Checkpointer, *spreadSource) {
		return openOwnerAt(ctx, t, shard, epoch, v.opts(append(extra, s3store.WithConditionalWrites(false))...)...)
	}
	// Compaction after every commit, so the checkpoint manifest the
	// zombie's Store caches shares its segment with pieces that stay live
	// (and a read of it finds the segment).
	zombie, zsrc := open(1, s3store.WithMaxSegments(2), s3store.WithCompaction(0.3, 1))
	for range 3 {
		zsrc.add()
		_, err := zombie.Checkpoint(ctx)
		require.NoError(t, err)
	}

	next, nsrc := open(2)
	_, err := next.Restore(ctx)
	require.NoError(t, err)
	nsrc.add()
	res, err := next.Checkpoint(ctx)
	require.NoError(t, err)

	zsrc.mu.Lock()
	zsrc.pieces = 0 // nothing changed: the checkpoint writes its manifest only
	zsrc.mu.Unlock()
	_, err = zombie.Checkpoint(ctx)
	require.ErrorIs(t, err, streaming.ErrFenced)

	check, _ := open(3)
	info, err := check.Restore(ctx)
	require.NoError(t, err)
	require.Equal(t, res.ID, info.ID, "the newer owner's checkpoint")
	require.Equal(t, streaming.Epoch(2), info.Epoch)
}

// ListShardKeys lists one shard's keys, those still in the root manifest
// included, with a GET of the manifests it reads and no LIST: the sweep of
// a restored shard's orphaned pieces asked ListKeys, a LIST of every
// shard's folder, once for each shard restored.
func TestListShardKeysListsNoOtherShard(t *testing.T) {
	f := newFakeS3(t)
	ctx := context.Background()
	const legacy, a, b = "kafka/central/readings/0", "kafka/central/readings/1", "kafka/central/readings/10"
	old, _ := f.store(t, s3store.WithPrefix("central"), s3store.WithShardOf(nil))
	checkpointN(t, old, legacy, 1) // in the root manifest, as before shards had manifests
	st, _ := f.store(t, s3store.WithPrefix("central"))
	checkpointN(t, st, a, 2)
	checkpointN(t, st, b, 1)

	fresh, rc := f.store(t, s3store.WithPrefix("central"))
	for shard, n := range map[string]int{legacy: 2, a: 3, b: 2} { // the manifest and the pieces
		keys, err := fresh.ListShardKeys(ctx, shard)
		require.NoError(t, err)
		require.Len(t, keys, n, "shard %s: %q", shard, keys)
		for _, k := range keys {
			sh, ok := streaming.CheckpointKeyShard(k)
			require.True(t, ok && sh == shard, "shard %s listed %q", shard, k)
		}
	}
	require.Zero(t, rc.Count("ListObjectsV2"), "requests: %v", rc.Counts())
}

// checkpointN takes n checkpoints of a counter shard into st.
func checkpointN(t *testing.T, st streaming.StateStore, shard string, n int) {
	t.Helper()
	src := &counterSource{}
	cp, err := streaming.NewCheckpointer(shard, src, st, memory.New())
	require.NoError(t, err)
	for range n {
		src.add()
		_, err := cp.Checkpoint(t.Context())
		require.NoError(t, err)
	}
}

// openOwnerAt opens a checkpointer of shard, owned at epoch, of one piece
// a key, on an S3 store of bucket "state" with opts.
func openOwnerAt(ctx context.Context, t *testing.T, shard string, epoch streaming.Epoch, opts ...s3store.Option) (*streaming.Checkpointer, *spreadSource) {
	t.Helper()
	st, err := s3store.New(ctx, "state", opts...)
	require.NoError(t, err)
	src := &spreadSource{pieces: 1}
	cp, err := streaming.NewCheckpointer(shard, src, st, memory.New(), streaming.WithMaxRuns(100),
		streaming.WithOwnership(streaming.OwnershipFunc(func() (streaming.Epoch, bool) { return epoch, true })))
	require.NoError(t, err)
	return cp, src
}
