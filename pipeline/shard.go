package pipeline

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"iter"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
)

// shard is one shard a worker owns: its keyed state (a keyedstate
// runtime under the shard's prefix of the worker's Badger database), its
// checkpointer, and what it last restored.
type shard struct {
	w     *Worker
	id    streaming.ShardID
	epoch streaming.Epoch
	rt    *keyedstate.Runtime[string]
	cp    *streaming.Checkpointer
	since time.Time // when the shard was gained
	// maxTS is the newest event time the shard applied (ns; 0: none),
	// for tflo_pipeline_event_lag_seconds.
	maxTS atomic.Int64
	// gcErrsLogged is the keyed state's count of failed value-log GCs
	// when the last one was logged (logValueLogGCErrors).
	gcErrsLogged atomic.Uint64

	// mu is held while a chunk of records is applied and its outputs
	// written, and by a checkpoint's cut: a cut never falls between a
	// record and its outputs, so the pre-commit that follows the cut
	// covers every output of the records the cut contains.
	mu   sync.Mutex
	rec  Record
	outs []streaming.Output
	dead []streaming.Output // dead letters of the chunk being applied
	// failed is the error of a chunk that failed part-way: the keys of
	// the records before the failing one changed and the cursor did not
	// move, or the outputs were not all written, so no cut may be taken
	// of this state (the source fails, or the shard is being released,
	// and the shard's next owner replays from its last checkpoint).
	// Guarded by mu (Kafka) or the MQTT source's cut lock.
	failed error
	// final is set once the shard is being released (a Kafka revoke or
	// loss, an MQTT source's stop; under mu, or the MQTT source's cut
	// lock, as failed): from then on the release's own final checkpoint
	// (finalCheckpointContext) is the only one that cuts it (cutRefused).
	// A Kafka shard's final cut holds its last record here, so it rolls
	// the archive's open file and that checkpoint publishes every row;
	// any other cut is refused as not held (a round that waited behind
	// the final checkpoint would commit another after it, of a shard
	// being closed, or fail on its closed state).
	final bool
	// finalDone: the shard's release took its final checkpoint (set by
	// the source before host.lost, on the releasing goroutine). Without
	// one (a lost partition, a crash-like stop, a final checkpoint that
	// failed) the host's FinalCheckpoint says so instead of passing the
	// last checkpoint off as the final one.
	finalDone bool

	restored activities.RestoreSummary
	// closeDurable closes the shard's own durable store (a durable
	// folder's shard folder; nothing otherwise).
	closeDurable func() error
}

// shardSource is a shard as the Checkpointer sees it: the keyed runtime,
// cut under the shard's lock.
type shardSource struct{ s *shard }

var (
	_ streaming.CheckpointSource = shardSource{}
	_ streaming.RunMerger        = shardSource{}
	_ streaming.NodeDropper      = shardSource{}
)

func (c shardSource) Cut(ctx context.Context) (streaming.Cut, error) {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if err := c.s.cutRefused(ctx); err != nil {
		return nil, err
	}
	cut, err := c.s.rt.Cut(ctx)
	if err == nil {
		c.s.markCut(cursorOffset(cut.Cursor()))
	}
	return cut, err
}

// markCut tells s's sinks where its checkpoint's cut falls (offset: of
// the last record the cut contains, -1 for none or a source without
// offsets), and the archive sinks to roll at a release's final cut;
// under the lock the shard's cuts take.
func (s *shard) markCut(offset int64) {
	for _, m := range s.w.sinkSets() {
		m.markCut(s.id, offset)
		if s.final {
			m.roll(s.id)
		}
	}
}

// cutRefused says why a checkpoint with ctx takes no cut of s (nil: it
// may), under the lock its cuts take (mu; an MQTT shard's, the source's
// cut lock): once a release began (final) only its final checkpoint
// cuts, and a shard whose chunk failed part-way takes none.
func (s *shard) cutRefused(ctx context.Context) error {
	if s.final && !isFinalCheckpoint(ctx) {
		return s.w.host.notOwner(s.id, s.epoch, "is releasing it, and its final checkpoint is the last one taken here")
	}
	if s.failed != nil {
		return errChunkFailed(s.id, s.failed)
	}
	return nil
}

// finalCheckpointKey marks the context of a release's final checkpoint
// (finalCheckpointContext).
type finalCheckpointKey struct{}

// finalCheckpointContext is ctx for the final checkpoint of a shard being
// released (shard.final): the one checkpoint whose cut shardSource.Cut
// takes from then on.
func finalCheckpointContext(ctx context.Context) context.Context {
	return context.WithValue(ctx, finalCheckpointKey{}, true)
}

// isFinalCheckpoint reports whether ctx is a release's final checkpoint's
// (finalCheckpointContext).
func isFinalCheckpoint(ctx context.Context) bool {
	v, _ := ctx.Value(finalCheckpointKey{}).(bool)
	return v
}

// errChunkFailed says why a shard whose chunk failed part-way takes no
// checkpoint.
func errChunkFailed(id streaming.ShardID, err error) error {
	return fmt.Errorf("shard %s: a chunk of records failed part-way, so its state or its outputs do not match its cursor (its next owner replays them from the last checkpoint): %w", id, err)
}

// cursorOffset is the source offset of a cursor: the Kafka offset of the
// last record a cut contains, -1 for none or another cursor type.
func cursorOffset(typ string, cursor []byte) int64 {
	if typ != streaming.CursorTypeKafka || len(cursor) == 0 {
		return -1
	}
	off, err := streaming.ParseKafkaOffset(cursor)
	if err != nil {
		return -1
	}
	return off.Offset
}

func (c shardSource) Restore(ctx context.Context, typ string, cursor []byte, pieces iter.Seq2[[]byte, error]) error {
	return c.s.rt.Restore(ctx, typ, cursor, pieces)
}

func (c shardSource) DropNodes(nodes []string) { c.s.rt.DropNodes(nodes) }

func (c shardSource) MergeRuns(ctx context.Context, runs []iter.Seq2[[]byte, error], emit func([]byte) error) error {
	return c.s.rt.MergeRuns(ctx, runs, emit)
}

// openShard builds shard id's keyed state and checkpointer and restores
// its newest checkpoint (or clears what the worker's database still held
// of it), then tells the sinks. src is the checkpoint source (nil: the
// keyed runtime, cut under the shard lock); cursors the cursor store (nil:
// the shard's durable store when it keeps cursors, else the manifest);
// owner decides whether the shard is still owned at s.epoch; epoch
// nextEpoch (an MQTT source's, which no group assigns) becomes one past
// the restored checkpoint's (claimEpoch), and a group's epoch may be
// raised by a claim (claimGroupEpoch), set in s.epoch before the sinks
// hear of it.
func (w *Worker) openShard(ctx context.Context, id streaming.ShardID, epoch streaming.Epoch, maxShards int,
	src func(*shard) streaming.CheckpointSource, cursors streaming.CursorStore, owner streaming.Ownership) (_ *shard, err error) {
	s := &shard{w: w, id: id, epoch: epoch, since: time.Now()}
	durable, closeDurable, err := w.openShardDurable(ctx, id)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = closeDurable()
		}
	}()
	s.closeDurable = closeDurable
	if cursors == nil {
		cursors = manifestCursors{}
		if cs, ok := durable.(streaming.CursorStore); ok {
			cursors = cs
		}
	}
	s.rec.Inputs = make([]streaming.Computed, len(w.c.g.Inputs()))
	if err := w.awaitDrop(ctx, id); err != nil {
		return nil, err
	}
	rt, err := w.newRuntime(id, maxShards)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			w.releaseRuntime(rt) // closed below; its part goes back to the others
		}
	}()
	s.rt = rt
	var cs streaming.CheckpointSource = shardSource{s}
	if src != nil {
		cs = src(s)
	}
	pol := w.c.p.Checkpoint
	opts := []streaming.CheckpointerOption{
		streaming.WithOwnership(owner),
		streaming.WithGraph(w.c.g),
		streaming.WithNonRestoredState(w.c.p.State.AllowNonRestoredState),
		streaming.WithCheckpointLogger(w.log),
		streaming.WithCursorFormatter(activities.FormatCursor),
		streaming.WithPreCommit(func(ctx context.Context, cid streaming.CheckpointID) error {
			return w.preCommit(ctx, s, cid)
		}),
		streaming.WithOnCommit(func(ctx context.Context, cid streaming.CheckpointID) {
			w.committed(ctx, s, cid)
		}),
	}
	if w.fingerprint != "" {
		opts = append(opts, streaming.WithSchemaFingerprint(w.fingerprint))
	}
	if pol.StageTimeout > 0 {
		opts = append(opts, streaming.WithStageTimeouts(pol.StageTimeout, 4*pol.StageTimeout, pol.StageTimeout))
	}
	s.cp, err = streaming.NewCheckpointer(checkpointName(w.c.p.Name, id), cs, durable, cursors, opts...)
	if err != nil {
		_ = rt.Close()
		return nil, err
	}
	start := time.Now()
	info, err := s.cp.Restore(ctx)
	if err == nil || errors.Is(err, streaming.ErrNotFound) {
		// info is zero when nothing was stored.
		var claimed streaming.Epoch
		var cerr error
		if epoch == nextEpoch {
			claimed, cerr = w.claimEpoch(ctx, id, info.Epoch, durable)
		} else {
			claimed, cerr = w.claimGroupEpoch(ctx, id, epoch, info.Epoch, durable)
		}
		if cerr != nil {
			_ = rt.Close()
			return nil, cerr
		}
		epoch, s.epoch = claimed, claimed
	}
	from := streaming.RestoredCut{Offset: -1}
	switch {
	case errors.Is(err, streaming.ErrNotFound):
		// Nothing stored: start empty, dropping what an earlier
		// ownership of the shard left in this worker's database.
		if err := cs.Restore(ctx, "", nil, func(func([]byte, error) bool) {}); err != nil {
			_ = rt.Close()
			return nil, fmt.Errorf("shard %s: clear state: %w", id, err)
		}
		w.log.Info("shard starts empty", "shard", id, "epoch", uint64(epoch))
	case err != nil:
		_ = rt.Close()
		return nil, fmt.Errorf("shard %s: restore: %w", id, err)
	default:
		st := s.cp.Status()
		s.restored = activities.RestoreSummary{CheckpointID: uint64(info.ID), Epoch: info.Epoch, Cursor: st.LastCursor, Bytes: info.Bytes}
		from = streaming.RestoredCut{ID: info.ID, Epoch: info.Epoch, Offset: cursorOffset(info.CursorType, info.Cursor)}
		// A large restore also compacts the state database (keyedstate's
		// compact.go), pausing the other shards' write-behind: say so.
		rs := rt.Stats()
		w.log.Info("shard restored", "shard", id, "epoch", uint64(epoch), "checkpoint", uint64(info.ID), "cursor", st.LastCursor,
			"bytes", info.Bytes, "keys", rs.RestoredItems, "took", time.Since(start).Round(100*time.Microsecond), "compaction", rs.RestoreCompaction.Round(100*time.Microsecond))
	}
	defer func() {
		if err != nil {
			// The sinks restored before the failure hold the shard (an
			// archive's writer): it is not opened here.
			for _, m := range w.sinkSets() {
				m.release(id, epoch)
			}
		}
	}()
	if w.dead != nil {
		if err := w.dead.restore(ctx, id, epoch, from); err != nil {
			_ = rt.Close()
			return nil, fmt.Errorf("shard %s: dead-letter sink: %w", id, err)
		}
	}
	if err := w.sinks.restore(ctx, id, epoch, from); err != nil {
		_ = rt.Close()
		return nil, fmt.Errorf("shard %s: sinks: %w", id, err)
	}
	return s, nil
}

// nextEpoch asks openShard to claim the shard's epoch (claimEpoch):
// Kafka epochs, which the group assigns, start at 1.
const nextEpoch streaming.Epoch = 0

// claimEpoch is the epoch of a new run of shard id, whose checkpoint was
// restored at epoch restored (0: none) from durable: one past it, and
// one past every epoch claimed for the shard before, claimed by
// compare-and-set in the coordination store (WithCoordination), else in
// a durable store that claims epochs (streaming.EpochClaimer: S3, the
// worker's own Badger, an in-memory store), so two runs started at once
// from the same checkpoint get different epochs and the older one's
// commits are refused (ErrFenced). With neither, such runs would share
// the epoch (a durable folder is locked by one process at a time; a
// store that claims no epochs gets a warning, unclaimedEpoch). Either
// claim gets 30 s.
func (w *Worker) claimEpoch(ctx context.Context, id streaming.ShardID, restored streaming.Epoch, durable streaming.StateStore) (streaming.Epoch, error) {
	ep, claimed, err := w.claimEpochAtLeast(ctx, id, restored+1, durable)
	if err == nil && !claimed {
		ep = w.unclaimedEpoch(id, restored, durable)
	}
	return ep, err
}

// claimGroupEpoch is the epoch of a new run of Kafka shard id, which the
// group assigned at epoch given: given itself, or, where claimEpoch
// claims epochs, the lowest epoch at least given (and past the restored
// checkpoint's) claimed there. The group's epoch alone does not fence a
// static member's old process (WithInstanceID): restarted while the old
// one hangs, the member rejoins in the generation the old one holds, so
// both runs would commit at the same epoch. The claim gives the new run
// the next one, and the old run's commits are refused (ErrFenced). It is
// almost always given, as a later generation's epochs lie 2^32 higher.
func (w *Worker) claimGroupEpoch(ctx context.Context, id streaming.ShardID, given, restored streaming.Epoch, durable streaming.StateStore) (streaming.Epoch, error) {
	ep, claimed, err := w.claimEpochAtLeast(ctx, id, max(given, restored+1), durable)
	if err == nil && !claimed {
		ep = given
	}
	return ep, err
}

// claimEpochAtLeast claims for shard id the lowest epoch, at least
// atLeast, past every epoch claimed for it before, in the coordination
// store or the durable store (see claimEpoch); claimed is false when
// neither claims epochs.
func (w *Worker) claimEpochAtLeast(ctx context.Context, id streaming.ShardID, atLeast streaming.Epoch, durable streaming.StateStore) (_ streaming.Epoch, claimed bool, _ error) {
	var (
		c     streaming.EpochClaimer
		where string
	)
	switch dc, ok := durable.(streaming.EpochClaimer); {
	case w.o.coord != nil:
		c, where = coordEpochs{w.o.coord}, "the coordination store"
	case ok:
		c, where = dc, "the durable store"
	default:
		return 0, false, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	ep, err := c.ClaimEpoch(ctx, epochKey(w.c.p.Name, id), atLeast)
	switch {
	case errors.Is(err, errors.ErrUnsupported): // a store that cannot refuse a second claim
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("shard %s: claim epoch in %s: %w", id, where, err)
	}
	return ep, true, nil
}

// unclaimedEpoch is the epoch of a run of shard id that could not claim
// one: one past the restored one. Over a durable store that may be
// shared between processes (S3 without conditional writes, or a store
// built in Go that is no EpochClaimer) it warns that a second run
// started at once would share it.
func (w *Worker) unclaimedEpoch(id streaming.ShardID, restored streaming.Epoch, durable streaming.StateStore) streaming.Epoch {
	if d := w.c.p.State.Durable; d.S3 != nil || d.Store != nil {
		w.log.Warn("shard epoch not claimed",
			"why", "no coordination store, and the durable store claims no epochs: a second run of the shard started at once from the same checkpoint would share the epoch, and neither would be fenced; "+
				"give the worker a coordination store, or a durable store that is a streaming.EpochClaimer (S3 with conditional writes)",
			"shard", id, "epoch", uint64(restored+1), "durable", fmt.Sprintf("%T", durable))
	}
	return restored + 1
}

// coordEpochs is a streaming.EpochClaimer on a coordination store: the
// last epoch claimed under a key, in decimal, replaced by compare-and-set
// (retryable errors retried every 100 ms until ctx ends).
type coordEpochs struct{ s coordination.Store }

func (c coordEpochs) ClaimEpoch(ctx context.Context, key string, atLeast streaming.Epoch) (streaming.Epoch, error) {
	for {
		next, won, err := c.try(ctx, key, atLeast)
		switch {
		case err == nil && won:
			return next, nil
		case err == nil:
			continue // lost the race: another run claimed first; read its epoch
		case !errors.Is(err, coordination.ErrRetryable):
			return 0, fmt.Errorf("key %s: %w", key, err)
		}
		select { // retryable: try again after a pause, until the deadline
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return 0, fmt.Errorf("key %s: %w", key, err)
		}
	}
}

// try reads the epoch claimed under key and claims the next one (at
// least atLeast) by compare-and-set; won is false when another claim
// came first.
func (c coordEpochs) try(ctx context.Context, key string, atLeast streaming.Epoch) (next streaming.Epoch, won bool, err error) {
	next, rev := atLeast, coordination.Revision(0)
	e, err := c.s.Get(ctx, coordination.Durable, key)
	switch {
	case errors.Is(err, coordination.ErrNotFound):
	case err != nil:
		return 0, false, fmt.Errorf("read the claimed epoch: %w", err)
	default:
		claimed, perr := strconv.ParseUint(string(e.Value), 10, 64)
		if perr != nil {
			return 0, false, fmt.Errorf("the claimed epoch is %q, not a number", e.Value)
		}
		if claimed == math.MaxUint64 { // one past it would wrap to an older epoch
			return 0, false, fmt.Errorf("the last claim is the largest epoch, %d; no epoch is past it", claimed)
		}
		next, rev = max(next, streaming.Epoch(claimed)+1), e.Revision
	}
	val := []byte(strconv.FormatUint(uint64(next), 10))
	var out coordination.CasOutcome
	if rev == 0 {
		out, err = c.s.Create(ctx, coordination.Durable, key, val)
	} else {
		out, err = c.s.Update(ctx, coordination.Durable, key, val, rev)
	}
	if err != nil {
		return 0, false, fmt.Errorf("claim epoch %d: %w", uint64(next), err)
	}
	return next, out.Won(), nil
}

// epochKey names a shard's claimed epochs, in the coordination store or
// a durable store that claims them: the pipeline and the shard, each as
// unpadded base64url (a key is tokens of [A-Za-z0-9_=-]; a shard id such
// as an MQTT client id may hold others).
func epochKey(pipeline string, id streaming.ShardID) string {
	enc := base64.RawURLEncoding
	return "epoch." + enc.EncodeToString([]byte(pipeline)) + "." + enc.EncodeToString([]byte(id))
}

// sinkSets are the pipeline's sinks and its dead-letter sink (when it has
// one): every one of them hears of a shard's cuts, rolls and release.
func (w *Worker) sinkSets() []*sinkSet {
	if w.dead == nil {
		return []*sinkSet{w.sinks}
	}
	return []*sinkSet{w.sinks, w.dead}
}

// preCommit is a checkpoint's pre-commit: every output (and dead letter)
// of a record the cut contains becomes durable before the state that
// skips it on replay.
func (w *Worker) preCommit(ctx context.Context, s *shard, id streaming.CheckpointID) error {
	if err := w.sinks.flush(ctx, s.id, id); err != nil {
		return err
	}
	if w.dead != nil {
		return w.dead.flush(ctx, s.id, id)
	}
	return nil
}

// committed runs after a checkpoint's cursor is saved: the sinks' commit,
// the metrics, and the warning of the value-log GCs that failed since the
// last one.
func (w *Worker) committed(ctx context.Context, s *shard, id streaming.CheckpointID) {
	rows, bytes, err := w.sinks.commit(ctx, s.id, id)
	if w.dead != nil {
		_, _, derr := w.dead.commit(ctx, s.id, id)
		err = errors.Join(err, derr)
	}
	if err != nil {
		w.log.Warn("sink commit failed; the next checkpoint retries", "shard", s.id, "checkpoint", uint64(id), "err", err)
	}
	s.cp.ReportArchived(rows, bytes)
	st := s.cp.Status()
	w.m.checkpointed(s.id, st)
	logValueLogGCErrors(w.log, w.gcLog, s.id, &s.gcErrsLogged, s.rt.Stats())
	if f := w.o.checkpointed; f != nil {
		f(s.id, st)
	}
}

// close releases the shard's keyed state (the write-behind buffer is
// drained to the database; nothing is checkpointed) and its archive
// writers.
func (s *shard) close() {
	for _, m := range s.w.sinkSets() {
		m.release(s.id, s.epoch)
	}
	if err := s.rt.Close(); err != nil {
		s.w.log.Warn("closing shard state", "shard", s.id, "err", err)
	}
	s.w.releaseRuntime(s.rt)
	if err := s.closeDurable(); err != nil {
		s.w.log.Warn("closing shard durable store", "shard", s.id, "err", err)
	}
}

// summary describes the shard's last completed checkpoint.
func (s *shard) summary() activities.CheckpointSummary {
	st := s.cp.Status()
	return activities.CheckpointSummary{CheckpointID: uint64(st.LastID), Epoch: st.LastEpoch, Cursor: st.LastCursor, Bytes: st.LastBytes, Duration: st.LastDuration}
}

// newRuntime opens shard id's keyed runtime on the worker's state DB
// with its part of State.Memory: the budget is split evenly among the
// shards the worker holds, this one included, and at most maxShards ways
// (the topic's partitions; 1 for an MQTT source; 0 when the source could
// not say, which bounds nothing: the split counts the shards held, so the
// shards' parts never add up to more than State.Memory). The runtimes already
// open are resized first, so their sum stays within the budget. A worker
// holding 2 of 6 partitions gives each half of its memory, not a sixth;
// its write batches are sized for the smallest part, a
// maxShards-th, which every later split can afford.
func (w *Worker) newRuntime(id streaming.ShardID, maxShards int) (*keyedstate.Runtime[string], error) {
	if maxShards <= 0 {
		maxShards = math.MaxInt32 // unknown: split among the shards held
	}
	total := int64(w.c.p.State.Memory)
	w.budgetMu.Lock()
	defer w.budgetMu.Unlock()
	n := min(len(w.runtimes)+1, maxShards)
	w.resizeLocked(n)
	budget := total / int64(n)
	rt, err := keyedstate.New(w.c.g, keyedstate.StringKeys{}, w.db, append([]keyedstate.Option{
		keyedstate.WithMemoryBudget(budget), keyedstate.WithDBShare(n), keyedstate.WithEntryBytes(w.entrySz),
		keyedstate.WithWriteBatchBytes(int(min(4<<20, max(total/int64(maxShards)/16, 64<<10)))),
		keyedstate.WithPrefix(w.statePrefix(id)),
		keyedstate.WithPieceBytes(w.pieceSz)},
		w.keyOptions(id)...)...)
	if err != nil {
		w.resizeLocked(min(len(w.runtimes), maxShards))
		if errors.Is(err, keyedstate.ErrBudgetTooSmall) {
			return nil, fmt.Errorf("shard %s: state.memory %v split %d ways leaves %d bytes a shard, too little: raise state.memory, or run more workers to share the shards (%w)",
				id, w.c.p.State.Memory, n, budget, err)
		}
		return nil, fmt.Errorf("shard %s: keyed state (budget %d bytes of %d, split %d ways): %w", id, budget, total, n, err)
	}
	if w.runtimes == nil {
		w.runtimes = map[*keyedstate.Runtime[string]]int{}
	}
	w.runtimes[rt] = maxShards
	return rt, nil
}

// statePrefix is the prefix of shard id's keys in the state database.
func (w *Worker) statePrefix(id streaming.ShardID) []byte {
	return []byte(statePrefix + w.c.p.Name + "/" + string(id) + "/")
}

// dropState deletes, in the background, the state a shard this worker
// gave up while running left in its database (closing its runtime drains
// the write-behind there): kept, it would stay until the worker held the
// shard again (a restore deletes it then), outside the memory budget when
// the database is in memory (no state folder), and on disk otherwise. A
// shard released because the worker stops keeps it: the database is
// closed next (in memory, freed), and a folder's is deleted at the next
// restore. openShard of the same shard waits for the deletion.
func (w *Worker) dropState(id streaming.ShardID) {
	if p := w.stopping.Load(); p == nil || chanClosed(*p) {
		return
	}
	prefix := w.statePrefix(id)
	done := make(chan struct{})
	w.dropMu.Lock()
	if w.drops == nil {
		w.drops = map[string]chan struct{}{}
	}
	prev := w.drops[string(prefix)]
	w.drops[string(prefix)] = done
	w.dropMu.Unlock()
	w.dropWG.Go(func() {
		defer close(done)
		if prev != nil {
			<-prev
		}
		start := time.Now()
		if err := keyedstate.DeleteState(w.dropCtx, w.db, prefix); err != nil {
			w.log.Warn("state of a released shard not deleted (its next restore here deletes it)", "shard", id, "err", err)
			return
		}
		w.log.Info("state of a released shard deleted", "shard", id, "took", time.Since(start).Round(time.Millisecond))
		w.dropMu.Lock()
		if w.drops[string(prefix)] == done {
			delete(w.drops, string(prefix))
		}
		w.dropMu.Unlock()
	})
}

// awaitDrop waits until the deletion of shard id's state (dropState), if
// any, has ended.
func (w *Worker) awaitDrop(ctx context.Context, id streaming.ShardID) error {
	w.dropMu.Lock()
	done := w.drops[string(w.statePrefix(id))]
	w.dropMu.Unlock()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("shard %s: waiting for the deletion of its earlier state here: %w", id, ctx.Err())
	}
}

// stopDrops ends the deletions under way (the next restore of their
// shards deletes what is left) before the database closes.
func (w *Worker) stopDrops() error {
	w.dropCancel()
	w.dropWG.Wait()
	return nil
}

func chanClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// releaseRuntime gives a closed shard's part of the budget back to the
// shards still held.
func (w *Worker) releaseRuntime(rt *keyedstate.Runtime[string]) {
	w.budgetMu.Lock()
	defer w.budgetMu.Unlock()
	maxShards, ok := w.runtimes[rt]
	if !ok {
		return
	}
	delete(w.runtimes, rt)
	if len(w.runtimes) > 0 {
		w.resizeLocked(min(len(w.runtimes), maxShards))
	}
}

// resizeLocked gives every open runtime an n-th of State.Memory (w.budgetMu
// held). A runtime that refuses its part (it would hold no key) keeps the
// part it had, and says so in the log.
func (w *Worker) resizeLocked(n int) {
	n = max(n, 1)
	budget := int64(w.c.p.State.Memory) / int64(n)
	for rt := range w.runtimes {
		if err := rt.Resize(budget, n); err != nil && !errors.Is(err, keyedstate.ErrClosed) {
			w.log.Warn("keyed state keeps its budget", "budget", budget, "split", n, "err", err)
		}
	}
}
