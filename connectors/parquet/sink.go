package parquet

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tflo-io/tflo/streaming"
)

// RowOf is the archive row of one output.
func RowOf(o streaming.Output) Row {
	return Row{Sensor: o.Key, Signal: o.Name, TS: o.TS, Mode: int32(o.Mode), Value: o.Value, Offset: o.Offset}
}

// Output is the output an archived row was made from (RowOf's inverse;
// the shard, epoch and topic are not archived and stay zero).
func (r Row) Output() streaming.Output {
	return streaming.Output{Key: r.Sensor, Name: r.Signal, TS: r.TS, Mode: streaming.Mode(r.Mode), Value: r.Value, Offset: r.Offset}
}

// shardNumber is the archive's shard number of a pipeline shard: the
// partition of a Kafka shard, 0 for a source without partitions.
func shardNumber(id streaming.ShardID) int32 {
	if _, p, err := id.KafkaPartition(); err == nil {
		return p
	}
	return 0
}

// Sink is the streaming.Sink archiving a pipeline's outputs exactly once:
// one RollingWriter per shard, at the epoch of the shard's owner, driven
// by the shard's checkpoints.
//
//   - Restore (streaming.SinkRestorer), when the shard is gained, opens the
//     shard's writer and restores the archive to the restored checkpoint
//     (RollingWriter.Restore at its cut offset and epoch): rows past it
//     are discarded, the source replays them.
//   - Write appends the outputs' rows (RowOf) to the shard's writer.
//   - MarkCut (streaming.SinkCutMarker), at a checkpoint's cut, marks the
//     offset the next pre-commit covers; rows written after the mark are
//     held in memory until that pre-commit ran.
//   - Flush, the checkpoint's pre-commit, is RollingWriter.PreCommit at
//     the marked cut (without a mark: at the last row written).
//   - Commit (streaming.SinkCommitter), once the checkpoint committed, is
//     RollingWriter.Commit at that checkpoint's cut; CommitCheckpoint also
//     returns what it committed.
//   - Roll, before a shard's final checkpoint, makes that checkpoint's
//     pre-commit finish the open file, so its commit publishes every row;
//     Release drops the shard's writer once the shard is gone.
//
// A shard must be restored before its first Write (the pipeline runtime
// does so). Write is called on the shard's goroutine; MarkCut, Flush and
// Commit of one shard are called one at a time (by its checkpoints), and
// may run concurrently with its Writes: while they use the writer, Writes
// are held in memory and appended after, so the hot path never waits for
// an upload of a pre-commit or a commit. A Write whose rows would make
// the writer encode a row group (or finish its file) hands them to a
// goroutine that appends them, and the rows held meanwhile, off the hot
// path; Writes wait for it only when it falls a few row groups behind.
// Different shards run concurrently.
type Sink struct {
	archive  Archive
	pipeline string
	opts     []WriterOption

	mu     sync.Mutex
	shards map[streaming.ShardID]*shardSink
}

var (
	_ streaming.Sink          = (*Sink)(nil)
	_ streaming.SinkCommitter = (*Sink)(nil)
	_ streaming.SinkRestorer  = (*Sink)(nil)
	_ streaming.SinkCutMarker = (*Sink)(nil)
)

// shardSink is one shard's writer and what its checkpoints left pending.
type shardSink struct {
	id    streaming.ShardID
	epoch streaming.Epoch

	// mu guards the fields below it. Write appends to w while holding mu
	// when nothing else uses w; MarkCut, Flush and Commit set busy (or
	// marked) under mu, after which Writes go to held, and use w without
	// mu.
	mu     sync.Mutex
	w      *RollingWriter
	held   []Row // rows written while w was busy or past the mark, in order
	rows   []Row // Write's rows for w, reused (w copies them)
	busy   bool  // Flush, Commit or the background append is using w
	bg     bool  // the background append is (busy is set too)
	want   int   // Flushes and Commits waiting for the writer
	idle   *sync.Cond
	maxBg  int // rows held while bg above which Write waits
	bgDone sync.WaitGroup
	// bgCtx bounds the background append; Release and Close cancel it,
	// so a stalled upload does not hold them (its rows are the next
	// owner's to replay).
	bgCtx    context.Context
	bgCancel context.CancelFunc
	marked   bool  // a cut is marked and not yet pre-committed
	mark     int64 // the marked cut
	last     int64 // offset of the last row written (-1: none since restore)
	err      error // rows the writer refused (see refused): fails every Flush
	roll     bool  // the next pre-commit finishes the open file

	cuts []checkpointCut // pre-committed, not yet committed
}

type checkpointCut struct {
	id  streaming.CheckpointID
	cut int64
}

// NewSink returns a sink archiving pipeline's outputs into a, which must
// be able to upload in parts, move and delete (LocalArchive, MemArchive
// and the S3 archive can). opts configure each shard's RollingWriter
// (WithTargetFileSize, WithMaxFileAge, ...).
func NewSink(a Archive, pipeline string, opts ...WriterOption) (*Sink, error) {
	if a == nil {
		return nil, errors.New("archive sink: nil archive")
	}
	if _, err := NewRollingWriter(a, pipeline, 0, 0, opts...); err != nil {
		return nil, fmt.Errorf("archive sink: %w", err)
	}
	return &Sink{archive: a, pipeline: pipeline, opts: opts, shards: map[streaming.ShardID]*shardSink{}}, nil
}

func (s *Sink) shard(id streaming.ShardID) (*shardSink, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.shards[id]
	if sh == nil {
		return nil, fmt.Errorf("archive sink %s: shard %s is not restored (Restore must come before its first Write)", s.pipeline, id)
	}
	return sh, nil
}

// selected returns shard's sink, or every shard's for shard "".
func (s *Sink) selected(shard streaming.ShardID) []*shardSink {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*shardSink
	for id, sh := range s.shards {
		if shard == "" || id == shard {
			out = append(out, sh)
		}
	}
	return out
}

// Restore implements streaming.SinkRestorer: it opens shard's writer at
// epoch and brings the shard's archive to the checkpoint the state was
// restored from: files that checkpoint sealed and its open file as it
// stood at its cut are published, everything later is discarded.
func (s *Sink) Restore(ctx context.Context, shard streaming.ShardID, epoch streaming.Epoch, from streaming.RestoredCut) error {
	_, err := s.RestoreShard(ctx, shard, epoch, from)
	return err
}

// RestoreShard is Restore, reporting what it published and discarded.
func (s *Sink) RestoreShard(ctx context.Context, shard streaming.ShardID, epoch streaming.Epoch, from streaming.RestoredCut) (RestoreStats, error) {
	// A writer of an earlier epoch (the shard gained again, not released
	// in between) stops first: its background upload would otherwise go
	// on beside the restore, leaving staging objects the restore did not
	// see.
	s.mu.Lock()
	old := s.shards[shard]
	delete(s.shards, shard)
	s.mu.Unlock()
	if old != nil {
		old.stop()
	}
	w, err := NewRollingWriter(s.archive, s.pipeline, shardNumber(shard), epoch, s.opts...)
	if err != nil {
		return RestoreStats{}, fmt.Errorf("archive sink shard %s: %w", shard, err)
	}
	at := RestorePoint{Cut: -1}
	if from.ID != 0 {
		at = RestorePoint{Cut: from.Offset, Epoch: from.Epoch}
	}
	st, err := w.Restore(ctx, at)
	if err != nil {
		return st, fmt.Errorf("archive sink shard %s epoch %d, restoring checkpoint %d (cut %d, epoch %d): %w",
			shard, uint64(epoch), uint64(from.ID), at.Cut, uint64(at.Epoch), err)
	}
	sh := &shardSink{id: shard, epoch: epoch, w: w, last: at.Cut, maxBg: int(4 * w.cfg.rowGroupRows)}
	sh.idle = sync.NewCond(&sh.mu)
	sh.bgCtx, sh.bgCancel = context.WithCancel(context.Background())
	s.mu.Lock()
	s.shards[shard] = sh
	s.mu.Unlock()
	return st, nil
}

// Write implements streaming.Sink. All outs come from one shard, at the
// epoch it was restored at. An upload that fails is retried by the next
// append or pre-commit; rows the writer refuses (out of order, too
// large) fail the shard's next Flush.
func (s *Sink) Write(ctx context.Context, outs []streaming.Output) error {
	if len(outs) == 0 {
		return nil
	}
	sh, err := s.shard(outs[0].Shard)
	if err != nil {
		return err
	}
	if ep := outs[0].Epoch; ep != sh.epoch {
		return fmt.Errorf("archive sink %s shard %s: outputs of epoch %d, but the shard is restored at epoch %d", s.pipeline, sh.id, uint64(ep), uint64(sh.epoch))
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.bg && len(sh.held) >= sh.maxBg { // the background append fell behind
		if err := sh.wait(ctx, func() bool { return sh.bg && len(sh.held) >= sh.maxBg }); err != nil {
			return fmt.Errorf("archive sink %s shard %s: waiting for the background append: %w", s.pipeline, sh.id, err)
		}
	}
	sh.last = outs[len(outs)-1].Offset
	idle := !sh.busy && !sh.marked && len(sh.held) == 0
	if idle && !sh.w.Heavy(len(outs)) {
		sh.rows = sh.rows[:0]
		for _, o := range outs {
			sh.rows = append(sh.rows, RowOf(o))
		}
		return sh.append(ctx, sh.rows)
	}
	for _, o := range outs {
		sh.held = append(sh.held, RowOf(o))
	}
	if idle { // heavy: the background append takes them
		sh.drainInBackground()
	}
	return nil
}

// acquire waits until nothing else uses the writer and takes it (mu
// held): Flush and Commit wait for the background append.
// The background append stops at its next turn for them, leaving the
// rows it did not take held: under a saturated hot path it would
// otherwise never run out of rows.
func (sh *shardSink) acquire(ctx context.Context) error {
	sh.want++
	err := sh.wait(ctx, func() bool { return sh.busy })
	sh.want--
	if err != nil {
		return err
	}
	sh.busy = true
	return nil
}

// wait waits (mu held) while cond holds, until ctx ends.
func (sh *shardSink) wait(ctx context.Context, cond func() bool) error {
	stop := context.AfterFunc(ctx, func() {
		sh.mu.Lock()
		sh.idle.Broadcast()
		sh.mu.Unlock()
	})
	defer stop()
	for cond() {
		if err := ctx.Err(); err != nil {
			return err
		}
		sh.idle.Wait()
	}
	return nil
}

// release gives the writer back (mu held).
func (sh *shardSink) release() {
	sh.busy, sh.bg = false, false
	sh.idle.Broadcast()
}

// append appends rows to the writer (its user holds it: mu, or busy).
// Only a refusal is an error; a failed upload is retried later.
func (sh *shardSink) append(ctx context.Context, rows []Row) error {
	if err := sh.w.Append(ctx, rows...); refused(err) {
		if sh.err == nil {
			sh.err = err
		}
		return err
	}
	return nil
}

// refused reports whether an Append error is the writer refusing the
// rows (out of order, or too large to be read back), not a failed upload.
func refused(err error) bool {
	return errors.Is(err, ErrRowOrder) || errors.Is(err, ErrRowTooLarge)
}

// MarkCut implements streaming.SinkCutMarker: the next Flush of shard
// pre-commits the rows up to offset; rows written after are held until
// then. Rows still held from an earlier mark whose pre-commit never came
// (a failed checkpoint) go to the writer now, so the held rows never
// span more than one cut.
func (s *Sink) MarkCut(shard streaming.ShardID, offset int64) {
	sh, err := s.shard(shard)
	if err != nil {
		return
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.marked, sh.mark = true, offset
	if sh.busy || len(sh.held) == 0 {
		return
	}
	n := 0
	for n < len(sh.held) && sh.held[n].Offset <= offset {
		n++
	}
	if n == 0 {
		return
	}
	if !sh.w.Heavy(n) {
		_ = sh.append(sh.bgCtx, sh.take(n)) // a refusal is kept in sh.err
		return
	}
	// Heavy (a row group to encode, a file to finish and upload): the
	// background append takes them (drain, up to the mark), as from
	// Write. MarkCut runs under the shard's lock: an upload here would
	// hold the shard's records, and its release, for as long as the
	// archive takes to answer.
	sh.drainInBackground()
}

// drainInBackground takes the writer (mu held; the writer free, or held
// by the caller, who hands it over) for a goroutine that appends the held
// rows (drain), so the caller does not wait for an encode or an upload.
func (sh *shardSink) drainInBackground() {
	sh.busy, sh.bg = true, true
	sh.bgDone.Add(1)
	go func() {
		defer sh.bgDone.Done()
		sh.drain(sh.bgCtx)
	}()
}

// Flush implements streaming.Sink: the pre-commit of checkpoint id of
// shard (every shard for ""). The rows up to the marked cut (every row
// written, without a mark) become durable; rows past it stay held and go
// to the writer after.
func (s *Sink) Flush(ctx context.Context, shard streaming.ShardID, id streaming.CheckpointID) error {
	var errs []error
	for _, sh := range s.selected(shard) {
		if _, err := sh.preCommit(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("archive sink %s shard %s epoch %d, checkpoint %d: %w", s.pipeline, sh.id, uint64(sh.epoch), uint64(id), err))
		}
	}
	return errors.Join(errs...)
}

func (sh *shardSink) preCommit(ctx context.Context, id streaming.CheckpointID) (CutStats, error) {
	sh.mu.Lock()
	if err := sh.acquire(ctx); err != nil {
		sh.mu.Unlock()
		return CutStats{}, err
	}
	if err := sh.err; err != nil {
		sh.release()
		sh.mu.Unlock()
		return CutStats{}, err
	}
	cut := max(sh.last, sh.w.lastCut, sh.w.lastOff)
	if sh.marked {
		cut = max(sh.mark, sh.w.lastCut)
	}
	// The held rows up to the cut go to the writer first.
	n := 0
	for n < len(sh.held) && sh.held[n].Offset <= cut {
		n++
	}
	before := sh.take(n)
	roll := sh.roll
	sh.roll = false
	sh.mu.Unlock()

	if len(before) > 0 {
		if err := sh.w.Append(ctx, before...); refused(err) {
			sh.mu.Lock()
			sh.err = err
			sh.mu.Unlock()
			sh.handOff()
			return CutStats{}, err
		}
	}
	if roll {
		// After the held rows: rolled before, the file would be finished
		// ahead of them and they would start one this pre-commit keeps open.
		sh.w.Roll()
	}
	st, err := sh.w.PreCommit(ctx, cut)
	if err == nil {
		if n := len(sh.cuts); n == 0 || sh.cuts[n-1].cut != cut || sh.cuts[n-1].id != id {
			sh.cuts = append(sh.cuts, checkpointCut{id: id, cut: cut})
		}
		sh.mu.Lock()
		if sh.marked && sh.mark == cut {
			sh.marked = false
		}
		sh.mu.Unlock()
	}
	sh.handOff()
	return st, err
}

// take removes and returns the first n held rows (mu held).
func (sh *shardSink) take(n int) []Row {
	if n == 0 {
		return nil
	}
	out := append([]Row(nil), sh.held[:n]...)
	rest := copy(sh.held, sh.held[n:])
	clear(sh.held[rest:])
	sh.held = sh.held[:rest]
	return out
}

// drainable is how many held rows the writer may take now: all of them,
// or those up to a pending mark (mu held).
func (sh *shardSink) drainable() int {
	if !sh.marked {
		return len(sh.held)
	}
	n := 0
	for n < len(sh.held) && sh.held[n].Offset <= sh.mark {
		n++
	}
	return n
}

// handOff gives the writer back after a pre-commit or a commit (their
// user holds it): the rows held meanwhile, written after the cut, go to
// the background append. Appended here, they made the checkpoint wait
// for their encoding and uploads, rows it does not cover, and for as
// long as the shard kept writing.
func (sh *shardSink) handOff() {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.drainable() == 0 {
		sh.release()
		return
	}
	sh.drainInBackground()
}

// drain appends the held rows the writer may take now (up to a pending
// mark), then gives the writer back to Write. Called by the writer's
// busy user.
func (sh *shardSink) drain(ctx context.Context) {
	for {
		sh.mu.Lock()
		n := sh.drainable()
		if n == 0 || (sh.bg && sh.want > 0) {
			sh.release()
			sh.mu.Unlock()
			return
		}
		rows := sh.take(n)
		sh.idle.Broadcast()
		sh.mu.Unlock()
		if err := sh.w.Append(ctx, rows...); refused(err) {
			sh.mu.Lock()
			if sh.err == nil {
				sh.err = err
			}
			sh.mu.Unlock()
		}
	}
}

// Commit implements streaming.SinkCommitter: see CommitCheckpoint.
func (s *Sink) Commit(ctx context.Context, shard streaming.ShardID, id streaming.CheckpointID) error {
	_, err := s.CommitCheckpoint(ctx, shard, id)
	return err
}

// CommitCheckpoint publishes what checkpoint id of shard (and every
// earlier one) pre-committed, once that checkpoint committed, and reports
// the rows and bytes the covered cuts made durable and the files it
// published. A checkpoint this sink did not pre-commit commits nothing.
func (s *Sink) CommitCheckpoint(ctx context.Context, shard streaming.ShardID, id streaming.CheckpointID) (CommitStats, error) {
	sh, err := s.shard(shard)
	if err != nil {
		return CommitStats{}, err
	}
	cut, n := int64(-1), 0
	for n < len(sh.cuts) && sh.cuts[n].id <= id {
		cut = sh.cuts[n].cut
		n++
	}
	if n == 0 {
		return CommitStats{Cut: -1}, nil
	}
	sh.mu.Lock()
	if err := sh.acquire(ctx); err != nil {
		sh.mu.Unlock()
		return CommitStats{}, fmt.Errorf("archive sink %s shard %s epoch %d, checkpoint %d: %w", s.pipeline, shard, uint64(sh.epoch), uint64(id), err)
	}
	sh.mu.Unlock()
	st, err := sh.w.Commit(ctx, cut)
	sh.handOff()
	if err != nil {
		return st, fmt.Errorf("archive sink %s shard %s epoch %d, checkpoint %d: %w", s.pipeline, shard, uint64(sh.epoch), uint64(id), err)
	}
	sh.cuts = append(sh.cuts[:0], sh.cuts[n:]...)
	return st, nil
}

// Roll makes shard's next pre-commit finish its open file whatever its
// size and age (RollingWriter.Roll): call it before the shard's final
// checkpoint, so that checkpoint's commit publishes every row.
func (s *Sink) Roll(shard streaming.ShardID) {
	sh, err := s.shard(shard)
	if err != nil {
		return
	}
	sh.mu.Lock()
	sh.roll = true
	sh.mu.Unlock()
}

// Release drops shard's writer (the shard is no longer owned here, at
// epoch): what it did not commit is the next owner's to restore. A
// writer of another epoch (the shard gained again) is kept.
func (s *Sink) Release(shard streaming.ShardID, epoch streaming.Epoch) {
	s.mu.Lock()
	sh := s.shards[shard]
	if sh != nil && sh.epoch == epoch {
		delete(s.shards, shard)
	} else {
		sh = nil
	}
	s.mu.Unlock()
	if sh != nil {
		sh.stop()
	}
}

// stop cancels the background append and waits for it: nothing writes
// for the shard's writer once it is gone.
func (sh *shardSink) stop() {
	sh.bgCancel()
	sh.bgDone.Wait()
}

// Close implements streaming.Sink: it drops every shard's writer. It
// writes nothing: the shards' final checkpoints committed what the
// archive keeps, and rows after them are the next owner's to replay.
func (s *Sink) Close(context.Context) error {
	s.mu.Lock()
	shards := make([]*shardSink, 0, len(s.shards))
	for _, sh := range s.shards {
		shards = append(shards, sh)
	}
	clear(s.shards)
	s.mu.Unlock()
	for _, sh := range shards {
		sh.stop()
	}
	return nil
}
