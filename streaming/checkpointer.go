package streaming

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"iter"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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

// NodeDropper is an optional capability of a CheckpointSource that holds
// a graph's per-key state (the keyed runtime in streaming/keyedstate).
// Restore calls DropNodes before CheckpointSource.Restore, with the hot
// path stopped, with the nodes whose state the restored keys may still
// hold but which must never load (the snapshot's dropped nodes, see
// WithNonRestoredState), sorted, nil for none; the source skips their
// entries as it loads a key's state (Instance.LoadDropping) until the next
// DropNodes. A snapshot that records dropped nodes is refused for a
// source without it.
type NodeDropper interface {
	DropNodes(nodes []string)
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
	snapshotTimeout  time.Duration
	saveTimeout      time.Duration
	cursorTimeout    time.Duration
	restoreTimeout   time.Duration
	now              func() time.Time
	ownership        Ownership
	operators        []OperatorInfo
	restoreCheck     func(saved []OperatorInfo, dropped []string, allowNonRestored bool) ([]string, error)
	allowNonRestored bool
	fingerprint      string
	batchBytes       int
	maxRuns          int
	formatCursor     func(typ string, cursor []byte) string
	log              *slog.Logger
	preCommit        func(ctx context.Context, id CheckpointID) error
	onCommit         func(ctx context.Context, id CheckpointID)
}

func defaultCheckpointerConfig() checkpointerConfig {
	return checkpointerConfig{
		snapshotTimeout: 5 * time.Second,
		saveTimeout:     time.Minute,
		cursorTimeout:   10 * time.Second,
		restoreTimeout:  5 * time.Minute,
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

// WithClock sets the clock used for durations and snapshot times
// (default time.Now).
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

// WithGraph records the nodes of g that keep state in every snapshot's
// metadata (as WithOperators does) and makes Restore refuse a snapshot
// whose state g cannot load (Graph.CheckRestoreDropping: a node removed
// unless WithNonRestoredState allows it, a node running another
// operator, or at a type version it neither is nor migrates from, a node
// named as one an earlier restore dropped), naming each such node, before
// any state is read: without it, every key's state would be refused as it
// loads, key by key.
func WithGraph(g *Graph) CheckpointerOption {
	return func(c *checkpointerConfig) {
		c.operators = g.statefulOperators()
		c.restoreCheck = g.CheckRestoreDropping
	}
}

// WithNonRestoredState, with allow, makes Restore drop the saved state of
// the nodes the graph (WithGraph) no longer has instead of refusing the
// snapshot, logging a warning that names them; every other node restores
// (default false: refused). The dropped names go into every later
// snapshot's metadata (SnapshotMeta.DroppedNodes), as keys not written
// since may still hold their state: the source skips it (NodeDropper),
// and a graph that adds a node of such a name again is refused, allowed
// or not.
func WithNonRestoredState(allow bool) CheckpointerOption {
	return func(c *checkpointerConfig) { c.allowNonRestored = allow }
}

// WithSchemaFingerprint records the archive's Parquet schema fingerprint
// in every snapshot's metadata, and makes Restore refuse a snapshot that
// records another one (a *SchemaMismatchError naming the snapshot and
// both fingerprints; snapshots recording none are restored). Default
// empty: nothing recorded or checked.
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
// What the records are and where they go is checkpoint_format.go's
// business.
//
// The stages run one by one (each carrying the epoch it was scheduled for),
// together through Checkpoint, or for several shards at once through
// CheckpointGroup, which batches their writes. Each stage runs under its
// own deadline; each write first checks that the Ownership still owns the
// shard at the checkpoint's epoch (a *NotOwnerError wrapping ErrFenced
// otherwise).
//
// The Checkpointer never refuses a checkpoint on its own: it counts
// consecutive storage failures and reports them (Status), and the
// checkpoint coordinator — which sees every shard of the pipeline —
// decides whether to hold off, and reports its breaker back
// (ReportBreaker) so a worker's metrics show the coordinator's state.
//
// Memory: at most one cut is pending per shard. A new Snapshot supersedes a
// pending one that has not saved its state (it is released unsaved, so its
// changes go into the next cut); the cut's memory is released as soon as
// its state is saved, or when Checkpoint or CheckpointGroup fails.
//
// Deadlines rely on the stores honouring ctx, as the StateStore and
// CursorStore contracts require: a write is never abandoned in flight (a
// manifest landing after its stage gave up could replace a newer one), so
// a store that ignores ctx holds its stage past the deadline.
//
// A Checkpointer is safe for concurrent use; stages are serialized.
type Checkpointer struct {
	shard   string
	seq     uint64 // creation order: orders the locks of a CheckpointGroup after shard
	src     CheckpointSource
	store   StateStore
	cursors CursorStore
	cfg     checkpointerConfig

	runMu sync.Mutex // serializes stages and Restore; guards the fields below
	// manifest is the last committed manifest; loaded lazily.
	manifest       Manifest
	manifestLoaded bool
	// sweepDue is set when the manifest was read from the store: the
	// next committed checkpoint sweeps the shard's pieces that no
	// manifest names (shardRecords.orphans), left by a crash or a failed save
	// before the read.
	sweepDue bool
	// dropped are the nodes whose state a restore dropped (sorted), as
	// every snapshot records them (SnapshotMeta.DroppedNodes).
	dropped       []string
	nextID        CheckpointID
	pending       *pendingCheckpoint
	lastCommitted CheckpointID

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
	// landed is set once a manifest save of this checkpoint failed: it
	// may have landed (a timeout after the write), naming pieces under
	// this checkpoint's keys, so a retried save that fails must not
	// delete them as unreferenced.
	landed bool
	bytes  int64
	pieces int
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

// CheckpointStatus is a shard's checkpoint status.
type CheckpointStatus struct {
	Shard           string        `json:"shard"`
	LastID          CheckpointID  `json:"last_id"`
	LastEpoch       Epoch         `json:"last_epoch"`
	LastCursor      string        `json:"last_cursor"`
	LastDuration    time.Duration `json:"last_duration"`
	LastBytes       int64         `json:"last_bytes"`
	LastPieces      int           `json:"last_pieces"`
	LastCompletedAt time.Time     `json:"last_completed_at"`
	InFlightID      CheckpointID  `json:"in_flight_id"`
	InFlightStage   string        `json:"in_flight_stage,omitempty"`
	// Breaker is the checkpoint coordinator's breaker as it last reported
	// it (ReportBreaker; closed until then). The Checkpointer does not
	// decide on it.
	Breaker BreakerState `json:"breaker"`
	// ConsecutiveFailures counts failed stages since the last committed
	// checkpoint, storage failures only: fencing and ordering refusals say
	// nothing about the stores and are not counted.
	ConsecutiveFailures int `json:"consecutive_failures"`
	// Failures counts every failed checkpoint attempt of this
	// Checkpointer (any stage, any cause), never reset: the
	// checkpoint-failures counter of the metrics.
	Failures   uint64 `json:"failures"`
	LastError  string `json:"last_error,omitempty"`
	StateBytes int64  `json:"state_bytes"` // bytes the manifest names
	Runs       int    `json:"runs"`
	// ArchivedRows and ArchivedBytes are what the sinks' commit of the
	// last checkpoint committed to the archive, as reported
	// (ReportArchived; 0 without an archive).
	ArchivedRows  int64 `json:"archived_rows,omitempty"`
	ArchivedBytes int64 `json:"archived_bytes,omitempty"`
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
	return &Checkpointer{
		shard: shard, seq: checkpointerSeq.Add(1), src: src, store: store, cursors: cursors, cfg: cfg,
		nextID: 1, status: CheckpointStatus{Shard: shard},
	}, nil
}

// checkpointerSeq numbers Checkpointers in creation order.
var checkpointerSeq atomic.Uint64

// Shard returns the shard's name.
func (c *Checkpointer) Shard() string { return c.shard }

// Owner returns the epoch this process owns the shard at now, and whether
// it owns it (the Ownership the Checkpointer was built with).
func (c *Checkpointer) Owner() (Epoch, bool) { return c.cfg.ownership.Owner() }

// ReportBreaker records the checkpoint coordinator's breaker state, which
// Status returns (for a worker's metrics). It changes nothing else.
func (c *Checkpointer) ReportBreaker(s BreakerState) {
	c.statusMu.Lock()
	c.status.Breaker = s
	c.statusMu.Unlock()
}

// ReportArchived records the rows and bytes the sinks' commit of the last
// checkpoint committed to the archive, which Status returns (for the
// checkpoint round's summary). Call it from the WithOnCommit function.
func (c *Checkpointer) ReportArchived(rows, bytes int64) {
	c.statusMu.Lock()
	c.status.ArchivedRows, c.status.ArchivedBytes = rows, bytes
	c.statusMu.Unlock()
}

func (c *Checkpointer) records() shardRecords { return shardRecords{c.shard, c.store} }

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
	m, stored, err := c.records().readManifest(ctx)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return err
	}
	c.setManifest(m)
	// The runs the next manifest keeps may hold the state of the nodes
	// the stored one records as dropped: keep recording them.
	for _, d := range stored.Meta.DroppedNodes {
		if !slices.Contains(c.dropped, d) {
			c.dropped = append(slices.Clone(c.dropped), d)
			slices.Sort(c.dropped)
		}
	}
	c.sweepDue = true
	return nil
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

// countsAsStorageFailure reports whether err says something about the
// stores: fencing and ordering refusals do not, nor a checkpoint its
// caller cancelled.
func countsAsStorageFailure(err error) bool {
	var notOwner *NotOwnerError
	return !errors.As(err, &notOwner) && !errors.Is(err, ErrFenced) &&
		!errors.Is(err, ErrStateNotSaved) && !errors.Is(err, ErrUnknownCheckpoint) &&
		!errors.Is(err, context.Canceled)
}

// fail records a failed stage and returns the error to report: a
// *NotOwnerError as is, anything else as a *StageError.
func (c *Checkpointer) fail(stage string, id CheckpointID, err error) error {
	storage := countsAsStorageFailure(err)
	var notOwner *NotOwnerError
	if _, ok := err.(*StageError); !ok && !errors.As(err, &notOwner) {
		err = &StageError{Shard: c.shard, Checkpoint: id, Stage: stage, Err: err}
	}
	if errors.Is(err, context.Canceled) {
		// Its caller gave up on it (a worker stopping, a shard being
		// released, whose final checkpoint follows): not a failure to
		// warn of. A stage timeout is context.DeadlineExceeded, and warns.
		c.cfg.log.Info("checkpoint cancelled", "shard", c.shard, "checkpoint", uint64(id), "stage", stage, "err", err)
	} else {
		c.cfg.log.Warn("checkpoint stage failed", "shard", c.shard, "checkpoint", uint64(id), "stage", stage, "err", err)
	}
	c.statusMu.Lock()
	c.status.Failures++
	if storage {
		c.status.ConsecutiveFailures++
	}
	c.status.LastError = err.Error()
	c.statusMu.Unlock()
	return err
}

func (c *Checkpointer) setInFlight(id CheckpointID, stage string) {
	c.statusMu.Lock()
	c.status.InFlightID, c.status.InFlightStage = id, stage
	c.statusMu.Unlock()
}

// dropPending releases a pending cut unsaved (its changes go into the
// next cut).
func (c *Checkpointer) dropPending() {
	if p := c.pending; p != nil {
		if p.cut != nil {
			p.cut.Release(false)
		}
		c.pending = nil
		c.setInFlight(0, "")
	}
}

// Snapshot is stage 1: it marks a consistent cut of the source for a new
// checkpoint at epoch. It fails with a *NotOwnerError when the shard is
// not owned at epoch. A pending checkpoint whose state is not saved is
// superseded (released unsaved).
func (c *Checkpointer) Snapshot(ctx context.Context, epoch Epoch) (CheckpointInfo, error) {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	return c.snapshot(ctx, epoch)
}

func (c *Checkpointer) snapshot(ctx context.Context, epoch Epoch) (CheckpointInfo, error) {
	if err := c.checkOwner(StageSnapshot, 0, epoch); err != nil {
		return CheckpointInfo{}, c.fail(StageSnapshot, 0, err)
	}
	c.dropPending()
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
	p := c.pending
	if p == nil || p.id != id {
		return SaveInfo{}, c.fail(StageSaveState, id, c.unknown(id))
	}
	if p.stateSaved {
		return SaveInfo{ID: id, Bytes: p.bytes, Pieces: p.pieces, Runs: len(c.manifest.Runs)}, nil
	}
	s := &groupShard{c: c, p: p}
	saveGroup(ctx, []*groupShard{s})
	if s.err != nil {
		return SaveInfo{}, c.fail(StageSaveState, id, s.err)
	}
	return SaveInfo{ID: id, Bytes: p.bytes, Pieces: p.pieces, Runs: len(c.manifest.Runs)}, nil
}

// meta is the SnapshotMeta every record of p carries.
func (c *Checkpointer) meta(p *pendingCheckpoint) SnapshotMeta {
	return SnapshotMeta{
		FormatVersion:     SnapshotFormatVersion,
		CursorType:        p.cursorType,
		Cursor:            p.cursor,
		Epoch:             p.epoch,
		Operators:         c.cfg.operators,
		DroppedNodes:      c.dropped,
		SchemaFingerprint: c.cfg.fingerprint,
		CreatedUnixNano:   p.startedAt.UnixNano(),
	}
}

// saveGroup runs stage 2 for shards (runMu of each held, each with a
// pending cut whose state is not saved): shards that share a StateStore
// share its SaveBatch calls for pieces and for manifests. Each shard ends
// with s.err set, or with its manifest committed and its cut released.
func saveGroup(ctx context.Context, shards []*groupShard) {
	for _, byStore := range groupByStore(shards) {
		saveOneStore(ctx, byStore)
	}
}

func saveOneStore(ctx context.Context, shards []*groupShard) {
	timeout, limit := time.Duration(0), 0
	for _, s := range shards {
		timeout, limit = max(timeout, s.c.cfg.saveTimeout), max(limit, s.c.cfg.batchBytes)
	}
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	store := shards[0].c.store
	w := &recordWriter{store: store, limit: limit}
	for _, s := range shards {
		c, p := s.c, s.p
		s.meta = c.meta(p)
		if err := c.checkOwner(StageSaveState, p.id, p.epoch); err != nil {
			s.err = err
			continue
		}
		if c.cfg.preCommit != nil {
			if err := c.cfg.preCommit(sctx, p.id); err != nil {
				s.err = fmt.Errorf("pre-commit outputs: %w", err)
				continue
			}
		}
		run, err := s.writeRun(sctx, w, 0, p.cut.Pieces)
		if err != nil {
			s.err = err
			continue
		}
		runs := append([]ManifestRun(nil), c.manifest.Runs...)
		if len(run.Pieces) > 0 { // nothing changed: the manifest moves its cursor only
			runs = append(runs, run)
		}
		if merger, ok := c.src.(RunMerger); ok && len(runs) > c.cfg.maxRuns {
			// The merge reads the new run back: write it first.
			w.flush(sctx)
			if s.err != nil {
				continue
			}
			old := runs
			rec := c.records()
			var lastKey string
			merged, err := s.writeRun(sctx, w, len(run.Pieces), func(ctx context.Context, emit func([]byte) error) error {
				seqs := make([]iter.Seq2[[]byte, error], len(old))
				for i, r := range old {
					seqs[i] = rec.loadRun(ctx, r, &lastKey)
				}
				return merger.MergeRuns(ctx, seqs, emit)
			})
			if err != nil {
				s.err = fmt.Errorf("merge %d runs: %w", len(old), nameCorruptPiece(err, lastKey))
				continue
			}
			runs = []ManifestRun{merged}
			for _, r := range old {
				for _, pc := range r.Pieces {
					s.garbage = append(s.garbage, pc.Key)
				}
			}
		}
		s.runs = runs
	}
	w.flush(sctx)
	commitManifests(sctx, store, shards)
	for _, s := range shards {
		c, p := s.c, s.p
		if s.err != nil {
			if !p.landed {
				c.records().drop(ctx, s.written, c.cfg.cursorTimeout, c.cfg.log)
			}
			continue
		}
		c.setManifest(Manifest{ID: p.id, Epoch: p.epoch, Runs: s.runs})
		if c.nextID <= p.id {
			c.nextID = p.id + 1
		}
		p.cut.Release(true)
		p.cut = nil
		p.stateSaved = true
		p.bytes = s.bytes
		p.pieces = len(s.written)
		c.setInFlight(p.id, "state-saved")
		if c.sweepDue {
			c.sweepDue = false
			s.garbage = append(s.garbage, c.records().orphans(ctx, p.epoch, p.id, s.runs, c.cfg.cursorTimeout, c.cfg.log)...)
			slices.Sort(s.garbage) // a merge's garbage is among the orphans
			s.garbage = slices.Compact(s.garbage)
		}
		c.records().drop(ctx, s.garbage, c.cfg.cursorTimeout, c.cfg.log)
	}
}

// groupByStore splits shards by the StateStore they write to, keeping
// their order; stores of a type that cannot be compared each get a group
// of their own.
func groupByStore(shards []*groupShard) [][]*groupShard {
	var groups [][]*groupShard
	for _, s := range shards {
		joined := false
		for i, g := range groups {
			if sameStore(g[0].c.store, s.c.store) {
				groups[i] = append(g, s)
				joined = true
				break
			}
		}
		if !joined {
			groups = append(groups, []*groupShard{s})
		}
	}
	return groups
}

// sameStore reports whether a and b are one StateStore; stores that
// cannot be compared are never the same. The value is asked, not its
// type: a struct store's interface field holding a map makes == panic
// though the struct type is comparable.
func sameStore(a, b StateStore) bool {
	return reflect.TypeOf(a) == reflect.TypeOf(b) && reflect.ValueOf(a).Comparable() && reflect.ValueOf(b).Comparable() && a == b
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
	c.status.ConsecutiveFailures = 0
	c.statusMu.Unlock()
	if c.cfg.onCommit != nil {
		c.cfg.onCommit(sctx, id)
	}
	return nil
}

// Checkpoint runs the three stages in order at the current epoch, each
// under its own deadline: the in-process path for users without Temporal.
// On failure the pending cut is released (its changes go into the next
// checkpoint).
func (c *Checkpointer) Checkpoint(ctx context.Context) (CheckpointResult, error) {
	epoch, _ := c.cfg.ownership.Owner()
	out := CheckpointGroup(ctx, []GroupMember{{Checkpointer: c, Epoch: epoch}})
	return out[0].Result, out[0].Err
}

// GroupMember is one shard of a CheckpointGroup: its Checkpointer and the
// epoch its checkpoint is for.
type GroupMember struct {
	Checkpointer *Checkpointer
	Epoch        Epoch
}

// GroupOutcome is one member's result: Err is nil, a *NotOwnerError, a
// *StageError naming the stage that failed, or, for a member the group
// refuses before any stage (no Checkpointer, its shard listed twice), an
// error saying so. Result holds what is known (the cut's id and cursor
// once the snapshot succeeded).
type GroupOutcome struct {
	Result CheckpointResult
	Err    error
}

// CheckpointGroup checkpoints several shards together (one worker's share
// of a checkpoint round): a cut of every shard, then their pieces written
// in shared SaveBatch calls per StateStore, their manifests in one shared
// call per store, and each shard's cursor. Every shard still commits on
// its own — its own manifest key, fenced by its own epoch — so one shard's
// failure or lost ownership fails that shard only, unless a shared write
// fails, which fails the shards in it. Outcomes are in the order of
// members; the same Checkpointer twice, or two Checkpointers of one shard
// on one StateStore, is refused for the second.
//
// It holds every member's stage lock for the whole call (taken in shard
// order, then creation order), so a stage-by-stage checkpoint of a member waits for it.
func CheckpointGroup(ctx context.Context, members []GroupMember) []GroupOutcome {
	out := make([]GroupOutcome, len(members))
	type slot struct {
		i int
		c *Checkpointer
	}
	order := make([]slot, 0, len(members))
	seen := make(map[*Checkpointer]bool, len(members))
	byName := make(map[string][]*Checkpointer, len(members))
	for i, m := range members {
		switch {
		case m.Checkpointer == nil:
			out[i].Err = errors.New("checkpoint group: member has no checkpointer")
		case seen[m.Checkpointer]:
			out[i].Err = fmt.Errorf("checkpoint group: shard %q appears twice", m.Checkpointer.shard)
		case slices.ContainsFunc(byName[m.Checkpointer.shard], func(o *Checkpointer) bool { return sameStore(o.store, m.Checkpointer.store) }):
			// Both would write the same keys, their manifests in one
			// batch: the first would report a commit the second replaced.
			out[i].Err = fmt.Errorf("checkpoint group: shard %q appears twice: two Checkpointers of one shard on one state store", m.Checkpointer.shard)
		default:
			seen[m.Checkpointer] = true
			byName[m.Checkpointer.shard] = append(byName[m.Checkpointer.shard], m.Checkpointer)
			order = append(order, slot{i, m.Checkpointer})
		}
	}
	// Shard names need only be unique per store: two Checkpointers of one
	// name (on two stores) must still be locked in one order by every
	// group, or two groups listing them in opposite orders deadlock.
	slices.SortFunc(order, func(a, b slot) int {
		return cmp.Or(strings.Compare(a.c.shard, b.c.shard), cmp.Compare(a.c.seq, b.c.seq))
	})
	for _, s := range order {
		s.c.runMu.Lock()
		defer s.c.runMu.Unlock()
	}

	// 1. Cut every shard.
	var saving []*groupShard
	idx := map[*groupShard]int{}
	for i, m := range members {
		if out[i].Err != nil {
			continue
		}
		c := m.Checkpointer
		info, err := c.snapshot(ctx, m.Epoch)
		out[i].Result.CheckpointInfo = info
		if err != nil {
			out[i].Err = err
			continue
		}
		s := &groupShard{c: c, p: c.pending}
		idx[s] = i
		saving = append(saving, s)
	}
	// 2. Save their state, sharing writes.
	saveGroup(ctx, saving)
	// 3. Commit each cursor.
	for _, s := range saving {
		i, c, p := idx[s], s.c, s.p
		if s.err != nil {
			out[i].Err = c.fail(StageSaveState, p.id, s.err)
			c.dropPending()
			continue
		}
		out[i].Result.Bytes, out[i].Result.Pieces = p.bytes, p.pieces
		if err := c.commitCursor(ctx, p.id); err != nil {
			out[i].Err = err
			c.dropPending()
			continue
		}
		out[i].Result.Duration = c.Status().LastDuration
	}
	return out
}

// Restore loads the newest committed manifest and its pieces into the
// source, positioned after the cursor the manifest records; a store that
// caches what it read (RefreshKey: the S3 store) rereads the manifest
// first, as another process may have checkpointed the shard since. Call
// it with the hot path stopped. With nothing stored it returns an error wrapping
// ErrNotFound and leaves the source untouched; a piece the manifest names
// that the store lacks is refused with an error naming it and wrapping
// ErrCorrupt, never ErrNotFound. A snapshot taken with another archive
// schema (WithSchemaFingerprint) is refused with an error wrapping
// ErrSchemaMismatch, the source untouched too. A pending checkpoint is
// dropped.
func (c *Checkpointer) Restore(ctx context.Context) (RestoreInfo, error) {
	c.runMu.Lock()
	defer c.runMu.Unlock()
	rctx, cancel := context.WithTimeout(ctx, c.cfg.restoreTimeout)
	defer cancel()
	c.dropPending()
	rec := c.records()
	if err := rec.refresh(rctx); err != nil {
		return RestoreInfo{}, &StageError{Shard: c.shard, Stage: StageRestore, Err: err}
	}
	m, stored, err := rec.readManifest(rctx)
	if err != nil {
		if errors.Is(err, ErrNotFound) {
			c.setManifest(Manifest{})
			c.dropped = nil
			return RestoreInfo{}, fmt.Errorf("shard %q: nothing to restore: %w", c.shard, err)
		}
		return RestoreInfo{}, &StageError{Shard: c.shard, Stage: StageRestore, Err: err}
	}
	meta := stored.Meta
	if want, got := c.cfg.fingerprint, meta.SchemaFingerprint; want != "" && got != "" && got != want {
		return RestoreInfo{}, &StageError{Shard: c.shard, Checkpoint: m.ID, Stage: StageRestore,
			Err: &SchemaMismatchError{Snapshot: string(rec.manifestKey()), Checkpoint: m.ID, Stored: got, Running: want}}
	}
	dropped := meta.DroppedNodes
	if f := c.cfg.restoreCheck; f != nil {
		d, err := f(meta.Operators, meta.DroppedNodes, c.cfg.allowNonRestored)
		if err != nil {
			return RestoreInfo{}, &StageError{Shard: c.shard, Checkpoint: m.ID, Stage: StageRestore,
				Err: fmt.Errorf("snapshot %s holds state this graph cannot load (undo the change or give the operator a Migrator; to drop the state of removed nodes, allow non-restored state; to drop all state instead, start the pipeline on an empty durable store): %w", rec.manifestKey(), err)}
		}
		if now := slices.DeleteFunc(slices.Clone(d), func(n string) bool { return slices.Contains(meta.DroppedNodes, n) }); len(now) > 0 {
			c.cfg.log.Warn("restore drops the saved state of nodes the graph no longer has (allow non-restored state); their names stay taken",
				"shard", c.shard, "checkpoint", uint64(m.ID), "snapshot", string(rec.manifestKey()), "nodes", now)
		}
		dropped = d
	}
	if nd, ok := c.src.(NodeDropper); ok {
		nd.DropNodes(dropped)
	} else if len(dropped) > 0 {
		return RestoreInfo{}, &StageError{Shard: c.shard, Checkpoint: m.ID, Stage: StageRestore,
			Err: fmt.Errorf("snapshot %s records dropped nodes %q whose state its keys may still hold, and the checkpoint source %T cannot skip it (it is no NodeDropper)", rec.manifestKey(), dropped, c.src)}
	}
	pieces := 0
	var lastKey string
	if err := c.src.Restore(rctx, meta.CursorType, meta.Cursor, rec.loadAll(rctx, m, &lastKey, &pieces)); err != nil {
		return RestoreInfo{}, &StageError{Shard: c.shard, Checkpoint: m.ID, Stage: StageRestore, Err: nameCorruptPiece(err, lastKey)}
	}
	c.setManifest(m)
	c.dropped = dropped
	c.sweepDue = true
	c.lastCommitted = 0
	c.statusMu.Lock()
	c.status.LastID = m.ID
	c.status.LastEpoch = m.Epoch
	c.status.LastCursor = c.cfg.formatCursor(meta.CursorType, meta.Cursor)
	c.statusMu.Unlock()
	return RestoreInfo{ID: m.ID, Epoch: m.Epoch, CursorType: meta.CursorType, Cursor: meta.Cursor, Bytes: m.Bytes(), Pieces: pieces}, nil
}

// nameCorruptPiece names the piece a source refused as corrupt while
// decoding pieces as they come (Restore, MergeRuns): the last one handed
// over, lastKey, is the one it refused.
func nameCorruptPiece(err error, lastKey string) error {
	if errors.Is(err, ErrCorrupt) && lastKey != "" && !strings.Contains(err.Error(), lastKey) {
		return fmt.Errorf("piece %q: %w", lastKey, err)
	}
	return err
}

// Status returns the checkpointer's status.
func (c *Checkpointer) Status() CheckpointStatus {
	c.statusMu.Lock()
	defer c.statusMu.Unlock()
	return c.status
}

// Run checkpoints every interval until ctx is done, for users without
// Temporal, and returns ctx's error. A failed checkpoint is logged and
// counted (Status); the next tick tries again. Run blocks; the caller owns
// its goroutine.
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
