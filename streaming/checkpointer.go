package streaming

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"
)

// CheckpointID numbers a shard's checkpoints; it strictly increases across
// restarts (a restore continues after the restored manifest's id). Zero
// means "none".
type CheckpointID uint64

// CheckpointSource is a shard's hot state as the Checkpointer sees it (the
// keyed runtime in streaming/keyedstate implements it).
//
// Cut is called from any goroutine, concurrently with the hot path; it
// marks a consistent cut between two records and must return quickly: the
// hot path may be stalled only while the cut is marked, never while it is
// written. At most one cut is outstanding at a time (the Checkpointer
// releases one before asking for the next).
//
// Restore replaces all state with the given pieces, applied in order (a
// later piece's entry for a key wins), positioned at cursor. It is called
// with the hot path stopped.
type CheckpointSource interface {
	Cut(ctx context.Context) (Cut, error)
	Restore(ctx context.Context, cursorType string, cursor []byte, pieces iter.Seq2[[]byte, error]) error
}

// Cut is a consistent image of a shard's state taken between two records:
// the state as of the last record the cursor names. Only the state changed
// since the previous saved cut is in it (incremental checkpoints).
type Cut interface {
	// Cursor is the position of the last record the cut contains.
	Cursor() (cursorType string, cursor []byte)
	// Pieces emits the cut's state as blobs of bounded size. It may be
	// called again after a failed attempt (a retried save) and must emit
	// the same state. emit owns nothing after it returns.
	Pieces(ctx context.Context, emit func(piece []byte) error) error
	// Release ends the cut. saved reports whether its pieces are durably
	// part of a committed manifest; when false the source must treat the
	// cut's changes as not yet checkpointed.
	Release(saved bool)
}

// RunMerger is an optional capability of a CheckpointSource: it merges
// runs of pieces (oldest first; for a key the newest run wins) into one
// run that holds the same state, so a manifest stops growing with every
// incremental checkpoint.
type RunMerger interface {
	MergeRuns(ctx context.Context, runs []iter.Seq2[[]byte, error], emit func(piece []byte) error) error
}

// Ownership tells the Checkpointer whether this process owns its shard.
// Implementations are safe for concurrent use.
type Ownership interface {
	// Owner returns the router's current epoch and whether this process
	// owns the shard now.
	Owner() (Epoch, bool)
}

// OwnershipFunc adapts a function to Ownership.
type OwnershipFunc func() (Epoch, bool)

// Owner calls f.
func (f OwnershipFunc) Owner() (Epoch, bool) { return f() }

// RouterOwnership returns the Ownership of shard as router sees it. A
// router's epoch is global (it bumps on every assignment change), so a
// checkpoint whose epoch moved between its stages is refused even when this
// shard stayed: the next checkpoint, at the new epoch, takes over.
func RouterOwnership[K any](router ShardRouter[K], shard K) Ownership {
	return OwnershipFunc(func() (Epoch, bool) {
		e := router.AssignmentEpoch()
		return e, router.Owns(shard)
	})
}

// CheckpointerOption configures a Checkpointer.
type CheckpointerOption func(*checkpointerConfig)

type checkpointerConfig struct {
	snapshotTimeout time.Duration
	saveTimeout     time.Duration
	cursorTimeout   time.Duration
	restoreTimeout  time.Duration
	threshold       int
	coolDown        time.Duration
	now             func() time.Time
	ownership       Ownership
	operators       []OperatorInfo
	fingerprint     string
	batchBytes      int
	maxRuns         int
	formatCursor    func(typ string, cursor []byte) string
	log             *slog.Logger
	preCommit       func(ctx context.Context, id CheckpointID) error
	onCommit        func(ctx context.Context, id CheckpointID)
}

func defaultCheckpointerConfig() checkpointerConfig {
	return checkpointerConfig{
		snapshotTimeout: 5 * time.Second,
		saveTimeout:     time.Minute,
		cursorTimeout:   10 * time.Second,
		restoreTimeout:  5 * time.Minute,
		threshold:       5,
		coolDown:        30 * time.Second,
		now:             time.Now,
		ownership:       OwnershipFunc(func() (Epoch, bool) { return 0, true }),
		batchBytes:      8 << 20,
		maxRuns:         8,
		formatCursor:    func(typ string, c []byte) string { return typ + ":" + hex.EncodeToString(c) },
		log:             slog.New(slog.DiscardHandler),
	}
}

func (c *checkpointerConfig) validate() error {
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"snapshot", c.snapshotTimeout}, {"save-state", c.saveTimeout}, {"commit-cursor", c.cursorTimeout}, {"restore", c.restoreTimeout}} {
		if d.v <= 0 {
			return fmt.Errorf("checkpointer: the %s stage deadline %v must be positive", d.name, d.v)
		}
	}
	if c.threshold < 1 {
		return fmt.Errorf("checkpointer: breaker threshold %d must be at least 1", c.threshold)
	}
	if c.coolDown <= 0 {
		return fmt.Errorf("checkpointer: breaker cool-down %v must be positive", c.coolDown)
	}
	if c.batchBytes < 1 {
		return fmt.Errorf("checkpointer: save batch size %d bytes must be positive", c.batchBytes)
	}
	if c.maxRuns < 1 {
		return fmt.Errorf("checkpointer: max runs %d must be at least 1", c.maxRuns)
	}
	if c.ownership == nil || c.now == nil || c.formatCursor == nil || c.log == nil {
		return errors.New("checkpointer: ownership, clock, cursor formatter and logger must not be nil")
	}
	return nil
}

// WithStageTimeouts sets the deadline of each stage: snapshot (marking the
// cut; default 5s), save-state (writing pieces and the manifest; default
// 1m) and commit-cursor (default 10s). Each stage runs under its own
// context.WithTimeout of the caller's ctx.
func WithStageTimeouts(snapshot, saveState, commitCursor time.Duration) CheckpointerOption {
	return func(c *checkpointerConfig) {
		c.snapshotTimeout, c.saveTimeout, c.cursorTimeout = snapshot, saveState, commitCursor
	}
}

// WithRestoreTimeout sets the deadline of Restore (default 5m).
func WithRestoreTimeout(d time.Duration) CheckpointerOption {
	return func(c *checkpointerConfig) { c.restoreTimeout = d }
}

// WithBreaker sets the circuit breaker: it opens after threshold
// consecutive failed checkpoints (default 5) and half-opens after
// coolDown (default 30s).
func WithBreaker(threshold int, coolDown time.Duration) CheckpointerOption {
	return func(c *checkpointerConfig) { c.threshold, c.coolDown = threshold, coolDown }
}

// WithClock sets the clock used for the breaker and durations (default
// time.Now).
func WithClock(now func() time.Time) CheckpointerOption {
	return func(c *checkpointerConfig) { c.now = now }
}

// WithOwnership sets who decides whether this process owns the shard
// (default: always owner at epoch 0, like LocalShard). See
// RouterOwnership.
func WithOwnership(o Ownership) CheckpointerOption {
	return func(c *checkpointerConfig) { c.ownership = o }
}

// WithOperators records the graph's operators in every snapshot's
// metadata (default none).
func WithOperators(ops []OperatorInfo) CheckpointerOption {
	return func(c *checkpointerConfig) { c.operators = ops }
}

// WithSchemaFingerprint records the archive's Parquet schema fingerprint
// in every snapshot's metadata (default empty).
func WithSchemaFingerprint(fp string) CheckpointerOption {
	return func(c *checkpointerConfig) { c.fingerprint = fp }
}

// WithSaveBatchBytes sets how many bytes of pieces go into one
// StateStore.SaveBatch call (default 8 MiB). It bounds the memory a save
// holds besides the cut itself.
func WithSaveBatchBytes(n int) CheckpointerOption {
	return func(c *checkpointerConfig) { c.batchBytes = n }
}

// WithMaxRuns sets how many runs a manifest may name before a save merges
// them into one (default 8; needs a source implementing RunMerger).
func WithMaxRuns(n int) CheckpointerOption {
	return func(c *checkpointerConfig) { c.maxRuns = n }
}

// WithCursorFormatter sets how status shows a cursor (default
// "type:hex").
func WithCursorFormatter(f func(cursorType string, cursor []byte) string) CheckpointerOption {
	return func(c *checkpointerConfig) { c.formatCursor = f }
}

// WithPreCommit sets a function SaveState calls after the checkpoint's cut
// and before it writes any piece (default none): the sinks' pre-commit,
// which makes every output of a record the cut contains durable before
// the state that skips that record on replay. An error fails the stage
// (it is retried with the stage).
func WithPreCommit(f func(ctx context.Context, id CheckpointID) error) CheckpointerOption {
	return func(c *checkpointerConfig) { c.preCommit = f }
}

// WithOnCommit sets a function called after checkpoint id's cursor is
// committed, on the caller's goroutine, with the stage's context (default
// none): the sinks' commit notification.
func WithOnCommit(f func(ctx context.Context, id CheckpointID)) CheckpointerOption {
	return func(c *checkpointerConfig) { c.onCommit = f }
}

// WithCheckpointLogger sets the logger (default discards).
func WithCheckpointLogger(l *slog.Logger) CheckpointerOption {
	return func(c *checkpointerConfig) { c.log = l }
}

// Stage names used in errors and status.
const (
	StageSnapshot     = "snapshot"
	StageSaveState    = "save-state"
	StageCommitCursor = "commit-cursor"
	StageRestore      = "restore"
)

// Checkpointer is the one place that sequences a shard's durable writes:
//
//  1. Snapshot: mark a consistent cut of the source at a cursor (fast; the
//     hot path stalls only for the marking).
//  2. SaveState: write the cut's pieces to the StateStore, then the
//     manifest naming every piece that makes up full state. The manifest
//     write is the commit point: a crash before it leaves the previous
//     manifest, cursor and state in agreement.
//  3. CommitCursor: save the cursor the cut reflects in the CursorStore.
//     Refused (ErrStateNotSaved) unless stage 2 of the same checkpoint
//     succeeded.
//
// Restore loads the newest manifest and resumes after the cursor it
// records, so a crash between stages 2 and 3 never applies a record twice.
//
// The stages run one by one (Temporal activities, each carrying the epoch
// it was scheduled for) or together through Checkpoint. Each runs under its
// own deadline; each write first checks that the Ownership still owns the
// shard at the checkpoint's epoch (a *NotOwnerError wrapping ErrFenced
// otherwise). A Breaker counts consecutive failed checkpoints: when open,
// Snapshot and Checkpoint fail at once with ErrBreakerOpen while the hot
// path keeps running.
//
// Memory: at most one cut is pending per shard. A new Snapshot supersedes a
// pending one that has not saved its state (it is released unsaved, so its
// changes go into the next cut); the cut's memory is released as soon as
// its state is saved, and when the breaker opens. While the breaker is
// open no cut is taken, and the source's set of changed keys grows at most
// to the number of keys.
//
// Deadlines rely on the stores honouring ctx, as the StateStore and
// CursorStore contracts require: a write is never abandoned in flight (a
// manifest landing after its stage gave up could replace a newer one), so
// a store that ignores ctx holds its stage past the deadline.
//
// A Checkpointer is safe for concurrent use; stages are serialized.
type Checkpointer struct {
	shard   string
	src     CheckpointSource
	store   StateStore
	cursors CursorStore
	cfg     checkpointerConfig
	breaker *Breaker

	runMu sync.Mutex // serializes stages and Restore; guards the fields below
	// manifest is the last committed manifest; loaded lazily.
	manifest       Manifest
	manifestLoaded bool
	nextID         CheckpointID
	pending        *pendingCheckpoint
	lastCommitted  CheckpointID

	statusMu sync.Mutex
	status   CheckpointStatus
}

type pendingCheckpoint struct {
	id         CheckpointID
	epoch      Epoch
	cut        Cut // nil once the state is saved
	cursorType string
	cursor     []byte
	startedAt  time.Time
	stateSaved bool
	bytes      int64
	pieces     int
}

// CheckpointInfo describes a checkpoint after its Snapshot stage.
type CheckpointInfo struct {
	ID         CheckpointID `json:"id"`
	Epoch      Epoch        `json:"epoch"`
	CursorType string       `json:"cursor_type"`
	Cursor     []byte       `json:"cursor"`
}

// SaveInfo describes a successful SaveState.
type SaveInfo struct {
	ID     CheckpointID `json:"id"`
	Bytes  int64        `json:"bytes"`  // piece and manifest bytes written
	Pieces int          `json:"pieces"` // pieces written (including a merge)
	Runs   int          `json:"runs"`   // runs the new manifest names
}

// CheckpointResult describes a completed Checkpoint.
type CheckpointResult struct {
	CheckpointInfo
	Bytes    int64         `json:"bytes"`
	Pieces   int           `json:"pieces"`
	Duration time.Duration `json:"duration"`
}

// RestoreInfo describes what Restore loaded.
type RestoreInfo struct {
	ID         CheckpointID `json:"id"`
	Epoch      Epoch        `json:"epoch"`
	CursorType string       `json:"cursor_type"`
	Cursor     []byte       `json:"cursor"`
	Bytes      int64        `json:"bytes"`
	Pieces     int          `json:"pieces"`
}

// CheckpointStatus is what the checkpoint workflow's status query shows.
type CheckpointStatus struct {
	Shard               string        `json:"shard"`
	LastID              CheckpointID  `json:"last_id"`
	LastEpoch           Epoch         `json:"last_epoch"`
	LastCursor          string        `json:"last_cursor"`
	LastDuration        time.Duration `json:"last_duration"`
	LastBytes           int64         `json:"last_bytes"`
	LastPieces          int           `json:"last_pieces"`
	LastCompletedAt     time.Time     `json:"last_completed_at"`
	InFlightID          CheckpointID  `json:"in_flight_id"`
	InFlightStage       string        `json:"in_flight_stage,omitempty"`
	Breaker             BreakerState  `json:"breaker"`
	ConsecutiveFailures int           `json:"consecutive_failures"`
	LastError           string        `json:"last_error,omitempty"`
	StateBytes          int64         `json:"state_bytes"` // bytes the manifest names
	Runs                int           `json:"runs"`
}

// NewCheckpointer returns a Checkpointer for shard (a name unique in the
// store: it prefixes every piece and manifest key and is the cursor key).
func NewCheckpointer(shard string, src CheckpointSource, store StateStore, cursors CursorStore, opts ...CheckpointerOption) (*Checkpointer, error) {
	cfg := defaultCheckpointerConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if shard == "" {
		return nil, errors.New("checkpointer: shard name must not be empty")
	}
	if src == nil || store == nil || cursors == nil {
		return nil, fmt.Errorf("checkpointer for shard %q: source, state store and cursor store must not be nil", shard)
	}
	br, err := NewBreaker(cfg.threshold, cfg.coolDown, cfg.snapshotTimeout+cfg.saveTimeout+cfg.cursorTimeout, cfg.now)
	if err != nil {
		return nil, fmt.Errorf("checkpointer for shard %q: %w", shard, err)
	}
	return &Checkpointer{
		shard: shard, src: src, store: store, cursors: cursors, cfg: cfg, breaker: br,
		nextID: 1, status: CheckpointStatus{Shard: shard},
	}, nil
}

// Breaker returns the checkpointer's breaker (for inspection).
func (c *Checkpointer) Breaker() *Breaker { return c.breaker }

func (c *Checkpointer) manifestKey() []byte { return []byte(c.shard + "/manifest") }

func (c *Checkpointer) pieceKey(epoch Epoch, id CheckpointID, n int) string {
	return c.shard + "/piece/" + strconv.FormatUint(uint64(epoch), 10) + "/" +
		strconv.FormatUint(uint64(id), 10) + "/" + strconv.Itoa(n)
}

func (c *Checkpointer) checkOwner(stage string, id CheckpointID, epoch Epoch) error {
	cur, owns := c.cfg.ownership.Owner()
	if owns && cur == epoch {
		return nil
	}
	return &NotOwnerError{Shard: c.shard, Checkpoint: id, Epoch: epoch, CurrentEpoch: cur, Owns: owns, Stage: stage}
}

// loadManifest reads the stored manifest once (runMu held).
func (c *Checkpointer) loadManifest(ctx context.Context) error {
	if c.manifestLoaded {
		return nil
	}
	m, _, err := c.readManifest(ctx)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	c.setManifest(m)
	return nil
}

func (c *Checkpointer) readManifest(ctx context.Context) (Manifest, SnapshotMeta, error) {
	s, err := c.store.Load(ctx, c.manifestKey())
	if err != nil {
		return Manifest{}, SnapshotMeta{}, fmt.Errorf("load manifest %q: %w", c.manifestKey(), err)
	}
	m, err := UnmarshalManifest(s.Data)
	if err != nil {
		return Manifest{}, SnapshotMeta{}, fmt.Errorf("manifest %q: %w", c.manifestKey(), err)
	}
	return m, s.Meta, nil
}

func (c *Checkpointer) setManifest(m Manifest) {
	c.manifest = m
	c.manifestLoaded = true
	if m.ID >= c.nextID {
		c.nextID = m.ID + 1
	}
	c.statusMu.Lock()
	c.status.StateBytes = m.Bytes()
	c.status.Runs = len(m.Runs)
	c.statusMu.Unlock()
}

// fail records a failed stage: the breaker counts it (unless it is a
// fencing or ordering refusal, which says nothing about the stores).
func (c *Checkpointer) fail(stage string, id CheckpointID, err error) error {
	var notOwner *NotOwnerError
	if !errors.As(err, &notOwner) && !errors.Is(err, ErrStateNotSaved) && !errors.Is(err, ErrUnknownCheckpoint) && !errors.Is(err, ErrBreakerOpen) {
		c.breaker.Failure()
		// An open breaker takes no cut for a while: free the pending one
		// (its changes go into the next cut) rather than hold its memory.
		if p := c.pending; p != nil && p.cut != nil && c.breaker.State() == BreakerOpen {
			p.cut.Release(false)
			c.pending = nil
			c.setInFlight(0, "")
		}
	}
	if _, ok := err.(*StageError); !ok && notOwner == nil {
		err = &StageError{Shard: c.shard, Checkpoint: id, Stage: stage, Err: err}
	}
	c.cfg.log.Warn("checkpoint stage failed", "shard", c.shard, "checkpoint", uint64(id), "stage", stage, "err", err)
	c.statusMu.Lock()
	c.status.LastError = err.Error()
	c.statusMu.Unlock()
	return err
}

func (c *Checkpointer) setInFlight(id CheckpointID, stage string) {
	c.statusMu.Lock()
	c.status.InFlightID, c.status.InFlightStage = id, stage
	c.statusMu.Unlock()
}

// Snapshot is stage 1: it marks a consistent cut of the source for a new
// checkpoint at epoch. It fails at once while the breaker is open, and with
// a *NotOwnerError when the shard is not owned at epoch. A pending
// checkpoint whose state is not saved is superseded (released unsaved).
func (c *Checkpointer) Snapshot(ctx context.Context, epoch Epoch) (CheckpointInfo, error) {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	return c.snapshot(ctx, epoch)
}

func (c *Checkpointer) snapshot(ctx context.Context, epoch Epoch) (CheckpointInfo, error) {
	if err := c.checkOwner(StageSnapshot, 0, epoch); err != nil {
		return CheckpointInfo{}, c.fail(StageSnapshot, 0, err)
	}
	if err := c.breaker.Allow(); err != nil {
		return CheckpointInfo{}, c.fail(StageSnapshot, 0, fmt.Errorf("shard %q: checkpoint refused: %w", c.shard, err))
	}
	if p := c.pending; p != nil {
		if p.cut != nil {
			p.cut.Release(false)
		}
		c.pending = nil
		c.setInFlight(0, "")
	}
	sctx, cancel := context.WithTimeout(ctx, c.cfg.snapshotTimeout)
	defer cancel()
	if err := c.loadManifest(sctx); err != nil {
		return CheckpointInfo{}, c.fail(StageSnapshot, 0, err)
	}
	id := c.nextID
	start := c.cfg.now()
	cut, err := c.src.Cut(sctx)
	if err == nil {
		err = sctx.Err()
		if err != nil {
			cut.Release(false)
		}
	}
	if err != nil {
		return CheckpointInfo{}, c.fail(StageSnapshot, id, err)
	}
	c.nextID++
	typ, cur := cut.Cursor()
	c.pending = &pendingCheckpoint{id: id, epoch: epoch, cut: cut, cursorType: typ, cursor: cur, startedAt: start}
	c.setInFlight(id, "cut")
	return CheckpointInfo{ID: id, Epoch: epoch, CursorType: typ, Cursor: cur}, nil
}

// SaveState is stage 2: it writes the pending cut's pieces, then the
// manifest that names them together with the earlier runs still needed
// (merging runs when there are more than the configured maximum). Calling
// it again for a checkpoint whose state is saved returns the same result.
func (c *Checkpointer) SaveState(ctx context.Context, id CheckpointID) (SaveInfo, error) {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	return c.saveState(ctx, id)
}

func (c *Checkpointer) saveState(ctx context.Context, id CheckpointID) (SaveInfo, error) {
	p := c.pending
	if p == nil || p.id != id {
		return SaveInfo{}, c.fail(StageSaveState, id, c.unknown(id))
	}
	if p.stateSaved {
		return SaveInfo{ID: id, Bytes: p.bytes, Pieces: p.pieces, Runs: len(c.manifest.Runs)}, nil
	}
	sctx, cancel := context.WithTimeout(ctx, c.cfg.saveTimeout)
	defer cancel()
	if err := c.checkOwner(StageSaveState, id, p.epoch); err != nil {
		return SaveInfo{}, c.fail(StageSaveState, id, err)
	}
	if c.cfg.preCommit != nil {
		if err := c.cfg.preCommit(sctx, id); err != nil {
			return SaveInfo{}, c.fail(StageSaveState, id, fmt.Errorf("pre-commit outputs: %w", err))
		}
	}
	meta := SnapshotMeta{
		FormatVersion:     SnapshotFormatVersion,
		CursorType:        p.cursorType,
		Cursor:            p.cursor,
		Epoch:             p.epoch,
		Operators:         c.cfg.operators,
		SchemaFingerprint: c.cfg.fingerprint,
		CreatedUnixNano:   p.startedAt.UnixNano(),
	}
	var written []string
	run, bytes, err := c.writeRun(sctx, p, id, 0, meta, p.cut.Pieces, &written)
	if err != nil {
		c.dropPieces(written)
		return SaveInfo{}, c.fail(StageSaveState, id, err)
	}
	runs := append([]ManifestRun(nil), c.manifest.Runs...)
	if len(run.Pieces) > 0 { // nothing changed: the manifest moves its cursor only
		runs = append(runs, run)
	}
	var garbage []string
	if merger, ok := c.src.(RunMerger); ok && len(runs) > c.cfg.maxRuns {
		old := runs
		merged, mbytes, err := c.writeRun(sctx, p, id, len(run.Pieces), meta, func(ctx context.Context, emit func([]byte) error) error {
			seqs := make([]iter.Seq2[[]byte, error], len(old))
			for i, r := range old {
				seqs[i] = c.loadRun(ctx, r, nil)
			}
			return merger.MergeRuns(ctx, seqs, emit)
		}, &written)
		if err != nil {
			c.dropPieces(written)
			return SaveInfo{}, c.fail(StageSaveState, id, fmt.Errorf("merge %d runs: %w", len(old), err))
		}
		bytes += mbytes
		runs = []ManifestRun{merged}
		for _, r := range old {
			for _, pc := range r.Pieces {
				garbage = append(garbage, pc.Key)
			}
		}
	}
	m := Manifest{ID: id, Epoch: p.epoch, Runs: runs}
	data := MarshalManifest(m)
	// Fence against a newer owner that already committed: a zombie's
	// manifest must not replace it.
	if _, stored, err := c.readManifest(sctx); err == nil && stored.Epoch > p.epoch {
		c.dropPieces(written)
		cur, owns := c.cfg.ownership.Owner()
		return SaveInfo{}, c.fail(StageSaveState, id, &NotOwnerError{Shard: c.shard, Checkpoint: id, Epoch: p.epoch, CurrentEpoch: max(cur, stored.Epoch), Owns: owns, Stage: StageSaveState})
	} else if err != nil && !errors.Is(err, ErrNotFound) {
		c.dropPieces(written)
		return SaveInfo{}, c.fail(StageSaveState, id, err)
	}
	if err := c.checkOwner(StageSaveState, id, p.epoch); err != nil {
		c.dropPieces(written)
		return SaveInfo{}, c.fail(StageSaveState, id, err)
	}
	if err := c.store.Save(sctx, c.manifestKey(), Snapshot{Meta: meta, Data: data}); err != nil {
		// The manifest may or may not have landed (a timeout after the
		// write): keep the pieces, forget the cached manifest so the next
		// stage re-reads it.
		c.manifestLoaded = false
		return SaveInfo{}, c.fail(StageSaveState, id, fmt.Errorf("save manifest %q: %w", c.manifestKey(), err))
	}
	bytes += int64(len(data))
	c.setManifest(m)
	if c.nextID <= id {
		c.nextID = id + 1
	}
	p.cut.Release(true)
	p.cut = nil
	p.stateSaved = true
	p.bytes = bytes
	p.pieces = len(written)
	c.setInFlight(id, "state-saved")
	c.dropPieces(garbage)
	return SaveInfo{ID: id, Bytes: bytes, Pieces: len(written), Runs: len(runs)}, nil
}

// writeRun stores the pieces produces emits in batches of about batchBytes
// and returns the run naming them.
func (c *Checkpointer) writeRun(ctx context.Context, p *pendingCheckpoint, id CheckpointID, first int, meta SnapshotMeta,
	produce func(context.Context, func([]byte) error) error, written *[]string) (ManifestRun, int64, error) {
	run := ManifestRun{ID: id}
	var batch []KeyedSnapshot
	batchBytes := 0
	var total int64
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		if err := c.checkOwner(StageSaveState, id, p.epoch); err != nil {
			return err
		}
		for _, it := range batch {
			*written = append(*written, string(it.Key))
		}
		if err := c.store.SaveBatch(ctx, batch); err != nil {
			return fmt.Errorf("save %d pieces (%d bytes): %w", len(batch), batchBytes, err)
		}
		batch, batchBytes = batch[:0], 0
		return nil
	}
	n := first
	err := produce(ctx, func(piece []byte) error {
		key := c.pieceKey(p.epoch, id, n)
		n++
		data := append([]byte(nil), piece...)
		batch = append(batch, KeyedSnapshot{Key: []byte(key), Snapshot: Snapshot{Meta: meta, Data: data}})
		batchBytes += len(data)
		total += int64(len(data))
		run.Pieces = append(run.Pieces, ManifestPiece{Key: key, Size: int64(len(data))})
		if batchBytes >= c.cfg.batchBytes {
			return flush()
		}
		return ctx.Err()
	})
	if err == nil {
		err = flush()
	}
	return run, total, err
}

// loadRun yields a run's pieces in order; when cur is not nil it holds the
// key of the piece last yielded.
func (c *Checkpointer) loadRun(ctx context.Context, r ManifestRun, cur *string) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		for _, pc := range r.Pieces {
			if cur != nil {
				*cur = pc.Key
			}
			s, err := c.store.Load(ctx, []byte(pc.Key))
			if err != nil {
				yield(nil, fmt.Errorf("load piece %q of checkpoint %d: %w", pc.Key, r.ID, err))
				return
			}
			if int64(len(s.Data)) != pc.Size {
				yield(nil, fmt.Errorf("piece %q of checkpoint %d: %d bytes, manifest says %d: %w", pc.Key, r.ID, len(s.Data), pc.Size, ErrCorrupt))
				return
			}
			if !yield(s.Data, nil) {
				return
			}
		}
	}
}

// dropPieces deletes pieces no manifest names, best effort (a crash leaves
// them behind; they are never read).
func (c *Checkpointer) dropPieces(keys []string) {
	if len(keys) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.cursorTimeout)
	defer cancel()
	for _, k := range keys {
		if err := c.store.Delete(ctx, []byte(k)); err != nil {
			c.cfg.log.Debug("drop unreferenced piece", "shard", c.shard, "key", k, "err", err)
			return
		}
	}
}

func (c *Checkpointer) unknown(id CheckpointID) error {
	if p := c.pending; p != nil {
		return fmt.Errorf("checkpoint %d is not the one in flight (%d): %w", id, p.id, ErrUnknownCheckpoint)
	}
	return fmt.Errorf("checkpoint %d is not in flight (last committed %d): %w", id, c.lastCommitted, ErrUnknownCheckpoint)
}

// CommitCursor is stage 3: it saves the cursor of checkpoint id, whose
// state must have been saved (ErrStateNotSaved otherwise). Calling it again
// for the last committed checkpoint succeeds without writing.
func (c *Checkpointer) CommitCursor(ctx context.Context, id CheckpointID) error {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	return c.commitCursor(ctx, id)
}

func (c *Checkpointer) commitCursor(ctx context.Context, id CheckpointID) error {
	p := c.pending
	if p == nil || p.id != id {
		if p == nil && id != 0 && id == c.lastCommitted {
			return nil
		}
		return c.fail(StageCommitCursor, id, c.unknown(id))
	}
	if !p.stateSaved {
		return c.fail(StageCommitCursor, id, fmt.Errorf("cursor save refused: %w", ErrStateNotSaved))
	}
	sctx, cancel := context.WithTimeout(ctx, c.cfg.cursorTimeout)
	defer cancel()
	if err := c.checkOwner(StageCommitCursor, id, p.epoch); err != nil {
		return c.fail(StageCommitCursor, id, err)
	}
	rec := CursorRecord{Type: p.cursorType, Cursor: p.cursor, Epoch: p.epoch, CheckpointID: uint64(id)}
	if err := c.cursors.SaveCursor(sctx, []byte(c.shard), rec); err != nil {
		return c.fail(StageCommitCursor, id, fmt.Errorf("save cursor %s: %w", c.cfg.formatCursor(p.cursorType, p.cursor), err))
	}
	c.breaker.Success()
	c.pending = nil
	c.lastCommitted = id
	now := c.cfg.now()
	c.statusMu.Lock()
	c.status.LastID = id
	c.status.LastEpoch = p.epoch
	c.status.LastCursor = c.cfg.formatCursor(p.cursorType, p.cursor)
	c.status.LastDuration = now.Sub(p.startedAt)
	c.status.LastBytes = p.bytes
	c.status.LastPieces = p.pieces
	c.status.LastCompletedAt = now
	c.status.InFlightID, c.status.InFlightStage = 0, ""
	c.status.LastError = ""
	c.statusMu.Unlock()
	if c.cfg.onCommit != nil {
		c.cfg.onCommit(sctx, id)
	}
	return nil
}

// Checkpoint runs the three stages in order at the current epoch, each
// under its own deadline: the in-process path for users without Temporal.
func (c *Checkpointer) Checkpoint(ctx context.Context) (CheckpointResult, error) {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	epoch, _ := c.cfg.ownership.Owner()
	info, err := c.snapshot(ctx, epoch)
	if err != nil {
		return CheckpointResult{}, err
	}
	si, err := c.saveState(ctx, info.ID)
	if err != nil {
		return CheckpointResult{CheckpointInfo: info}, err
	}
	if err := c.commitCursor(ctx, info.ID); err != nil {
		return CheckpointResult{CheckpointInfo: info, Bytes: si.Bytes, Pieces: si.Pieces}, err
	}
	st := c.Status()
	return CheckpointResult{CheckpointInfo: info, Bytes: si.Bytes, Pieces: si.Pieces, Duration: st.LastDuration}, nil
}

// Restore loads the newest committed manifest and its pieces into the
// source, positioned after the cursor the manifest records. Call it with
// the hot path stopped. With nothing stored it returns an error wrapping
// ErrNotFound and leaves the source untouched. A pending checkpoint is
// dropped.
func (c *Checkpointer) Restore(ctx context.Context) (RestoreInfo, error) {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, c.cfg.restoreTimeout)
	defer cancel()
	if p := c.pending; p != nil {
		if p.cut != nil {
			p.cut.Release(false)
		}
		c.pending = nil
		c.setInFlight(0, "")
	}
	m, meta, err := c.readManifest(rctx)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			c.setManifest(Manifest{})
			return RestoreInfo{}, fmt.Errorf("shard %q: nothing to restore: %w", c.shard, err)
		}
		return RestoreInfo{}, &StageError{Shard: c.shard, Stage: StageRestore, Err: err}
	}
	pieces := 0
	var lastKey string
	all := func(yield func([]byte, error) bool) {
		for _, r := range m.Runs {
			for data, err := range c.loadRun(rctx, r, &lastKey) {
				if err == nil {
					pieces++
				}
				if !yield(data, err) {
					return
				}
			}
		}
	}
	if err := c.src.Restore(rctx, meta.CursorType, meta.Cursor, all); err != nil {
		if errors.Is(err, ErrCorrupt) && lastKey != "" && !strings.Contains(err.Error(), lastKey) {
			// Name the object: the source decodes pieces as they come, so
			// the last one handed over is the one it refused.
			err = fmt.Errorf("piece %q: %w", lastKey, err)
		}
		return RestoreInfo{}, &StageError{Shard: c.shard, Checkpoint: m.ID, Stage: StageRestore, Err: err}
	}
	c.setManifest(m)
	c.lastCommitted = 0
	c.statusMu.Lock()
	c.status.LastID = m.ID
	c.status.LastEpoch = m.Epoch
	c.status.LastCursor = c.cfg.formatCursor(meta.CursorType, meta.Cursor)
	c.statusMu.Unlock()
	return RestoreInfo{ID: m.ID, Epoch: m.Epoch, CursorType: meta.CursorType, Cursor: meta.Cursor, Bytes: m.Bytes(), Pieces: pieces}, nil
}

// Status returns the checkpointer's status for the workflow's query.
func (c *Checkpointer) Status() CheckpointStatus {
	c.statusMu.Lock()
	st := c.status
	c.statusMu.Unlock()
	st.Breaker = c.breaker.State()
	st.ConsecutiveFailures = c.breaker.ConsecutiveFailures()
	return st
}

// Run checkpoints every interval until ctx is done, for users without
// Temporal, and returns ctx's error. A failed checkpoint is logged and
// counted by the breaker (an open breaker makes the next ticks fail fast);
// the next tick tries again. Run blocks; the caller owns its goroutine.
func (c *Checkpointer) Run(ctx context.Context, interval time.Duration) error {
	if interval <= 0 {
		return fmt.Errorf("checkpointer for shard %q: interval %v must be positive", c.shard, interval)
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			if res, err := c.Checkpoint(ctx); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				c.cfg.log.Warn("checkpoint failed", "shard", c.shard, "err", err)
			} else {
				c.cfg.log.Debug("checkpoint", "shard", c.shard, "id", uint64(res.ID), "bytes", res.Bytes, "duration", res.Duration)
			}
		}
	}
}
