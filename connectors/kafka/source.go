package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tflo-io/tflo/streaming"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Source is one consumer-group member feeding per-partition keyed graphs.
// Create it with NewSource, run it with Run (which blocks), stop it with
// Close or by cancelling Run's context; both leave the group after every
// owned partition's final checkpoint.
type Source struct {
	cfg    sourceConfig
	router *KafkaShardRouter

	mu      sync.Mutex // guards parts, cl, cancel, fatal, nparts
	parts   map[Partition]*partition
	nparts  map[string]int // partition count per topic, once known
	cl      *kgo.Client
	cancel  context.CancelFunc
	fatal   error
	running atomic.Bool
	closed  atomic.Bool
	runDone chan struct{}

	stats struct {
		applied, deadLettered, deadLetterErrors       atomic.Uint64
		checkpoints, checkpointFailures, revokeFailed atomic.Uint64
		restoredLocal, restoredDurable, restoredEmpty atomic.Uint64
	}
	dlqErr      atomic.Pointer[error]
	dlqInflight *barrier
}

// NewSource validates the options and returns a Source. It does not
// connect: Run does.
func NewSource(opts ...SourceOption) (*Source, error) {
	cfg := defaultSourceConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Source{cfg: cfg, router: NewKafkaShardRouter(), parts: map[Partition]*partition{}, nparts: map[string]int{}, runDone: make(chan struct{}), dlqInflight: newBarrier()}, nil
}

// Router returns the member's shard router.
func (s *Source) Router() *KafkaShardRouter { return s.router }

// Stats is a snapshot of the Source's counters.
type Stats struct {
	Applied            uint64 // records applied to state (or handed to the handler, or to the Partitions' handlers)
	DeadLettered       uint64 // records that failed to decode, sent to the DLQ
	DeadLetterErrors   uint64 // DLQ produces that failed
	Dropped            uint64 // records dropped because their partition was no longer owned
	Checkpoints        uint64 // successful partition checkpoints (durable)
	CheckpointFailures uint64
	RevokeFailures     uint64 // final checkpoints on revoke that failed or timed out
	RestoredLocal      uint64 // assigned partitions restored from the local store
	RestoredDurable    uint64 // ... from the durable store
	RestoredEmpty      uint64 // ... with nothing stored
	Owned              int
	Epoch              streaming.Epoch
}

// Stats returns the Source's counters.
func (s *Source) Stats() Stats {
	return Stats{
		Applied:            s.stats.applied.Load(),
		DeadLettered:       s.stats.deadLettered.Load(),
		DeadLetterErrors:   s.stats.deadLetterErrors.Load(),
		Dropped:            s.router.Dropped(),
		Checkpoints:        s.stats.checkpoints.Load(),
		CheckpointFailures: s.stats.checkpointFailures.Load(),
		RevokeFailures:     s.stats.revokeFailed.Load(),
		RestoredLocal:      s.stats.restoredLocal.Load(),
		RestoredDurable:    s.stats.restoredDurable.Load(),
		RestoredEmpty:      s.stats.restoredEmpty.Load(),
		Owned:              len(s.router.Owned()),
		Epoch:              s.router.AssignmentEpoch(),
	}
}

func (s *Source) baseOpts() ([]kgo.Opt, error) {
	sec, err := s.cfg.security.kgoOpts()
	if err != nil {
		return nil, err
	}
	return append([]kgo.Opt{kgo.SeedBrokers(s.cfg.brokers...)}, sec...), nil
}

// Run joins the group and consumes until ctx is cancelled, Close is
// called, or a fatal error (wrong credentials, a partition that cannot be
// restored). On the way out it leaves the group, which revokes every owned
// partition and runs its final checkpoint. It returns nil on a requested
// stop. Run may be called once.
func (s *Source) Run(ctx context.Context) error {
	if !s.running.CompareAndSwap(false, true) {
		return errors.New("kafka source: Run called twice")
	}
	defer close(s.runDone)
	if s.closed.Load() {
		return ErrClosed
	}
	base, err := s.baseOpts()
	if err != nil {
		return err
	}
	who := fmt.Sprintf("kafka source (group %q)", s.cfg.group)
	if err := checkConnect(ctx, s.cfg.brokers, s.cfg.kgoOpts, who, s.cfg.security); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it connected: nothing was owned
		}
		return err
	}
	opts := append(base,
		kgo.ConsumerGroup(s.cfg.group),
		kgo.ConsumeTopics(s.cfg.topics...),
		kgo.Balancers(kgo.CooperativeStickyBalancer()),
		kgo.DisableAutoCommit(),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(s.onAssigned),
		kgo.OnPartitionsRevoked(s.onRevoked),
		kgo.OnPartitionsLost(s.onLost),
		kgo.AdjustFetchOffsetsFn(s.adjustOffsets),
	)
	opts = append(opts, s.cfg.kgoOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	s.cl, s.cancel = cl, cancel
	s.mu.Unlock()
	if s.closed.Load() {
		cancel()
	}
	var bg sync.WaitGroup // goroutines Run owns besides the poll loop
	defer bg.Wait()
	if s.cfg.interval > 0 {
		bg.Go(func() { s.checkpointEvery(ctx, s.cfg.interval) })
	}

	for ctx.Err() == nil {
		fetches := cl.PollRecords(ctx, s.cfg.maxPoll)
		if fetches.IsClientClosed() {
			break
		}
		fetches.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			if isAuthError(err) {
				s.fail(fmt.Errorf("%s: %w: %v", who, ErrAuthentication, err))
				return
			}
			s.cfg.log.Warn("kafka fetch error", "topic", t, "partition", p, "err", err)
		})
		fetches.EachPartition(func(ft kgo.FetchTopicPartition) {
			if len(ft.Records) == 0 {
				return
			}
			s.mu.Lock()
			w := s.parts[Partition{ft.Topic, ft.Partition}]
			s.mu.Unlock()
			if w == nil || w.stopping.Load() {
				s.router.CountDropped(len(ft.Records))
				return
			}
			select {
			case w.in <- ft.Records:
			case <-w.stop:
				s.router.CountDropped(len(ft.Records))
			case <-ctx.Done():
				s.router.CountDropped(len(ft.Records)) // shutting down: never applied
			}
		})
	}
	// Leaving the group revokes every owned partition: the final
	// checkpoints run inside Close (a periodic checkpoint still running
	// fails fast on the cancelled ctx and is waited for on return).
	cancel()
	cl.Close()
	s.mu.Lock()
	left := make([]*partition, 0, len(s.parts))
	for _, w := range s.parts {
		left = append(left, w)
	}
	clear(s.parts)
	fatal := s.fatal
	s.mu.Unlock()
	for _, w := range left {
		w.halt()
		if w.h != nil {
			// Not revoked by the group (the client closed without
			// leaving): nothing may be committed any more.
			if err := w.h.Release(context.Background(), false); err != nil {
				s.cfg.log.Warn("releasing partition failed", "partition", w.p.String(), "err", err)
			}
		}
	}
	return fatal
}

// Close stops Run (if running) and waits for it to return. Idempotent.
func (s *Source) Close() error {
	s.closed.Store(true)
	s.mu.Lock()
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	if s.running.Load() {
		<-s.runDone
	}
	return nil
}

func (s *Source) fail(err error) {
	s.mu.Lock()
	if s.fatal == nil {
		s.fatal = err
	}
	cancel := s.cancel
	s.mu.Unlock()
	s.cfg.log.Error("kafka source stopping", "err", err)
	if cancel != nil {
		cancel()
	}
}

func toPartitions(m map[string][]int32) []Partition {
	var ps []Partition
	for t, parts := range m {
		for _, p := range parts {
			ps = append(ps, Partition{t, p})
		}
	}
	return ps
}

func (s *Source) onAssigned(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	ps := toPartitions(m)
	if len(ps) == 0 {
		return
	}
	_, gen := cl.GroupMetadata()
	epoch := s.router.Assign(gen, ps...)
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() {
			s.mu.Lock()
			stale := s.parts[p]
			delete(s.parts, p)
			s.mu.Unlock()
			if stale != nil { // assigned again without a revoke in between
				stale.halt()
			}
			open := s.openPartition
			if s.cfg.partitions != nil {
				open = s.openHandled
			}
			w, err := open(ctx, cl, p, epoch)
			if err != nil {
				s.fail(&PartitionError{Partition: p, Op: "restore", Err: err})
				return
			}
			s.mu.Lock()
			s.parts[p] = w
			s.mu.Unlock()
			go w.run()
		})
	}
	wg.Wait()
	s.cfg.log.Info("partitions assigned", "group", s.cfg.group, "partitions", fmt.Sprint(ps), "generation", gen, "epoch", uint64(epoch))
}

// openHandled opens p through the runtime's Partitions (WithPartitions).
func (s *Source) openHandled(ctx context.Context, cl *kgo.Client, p Partition, epoch streaming.Epoch) (*partition, error) {
	w := newPartition(s, p, epoch)
	rctx, cancel := context.WithTimeout(ctx, s.cfg.restoreTimeout)
	defer cancel()
	h, last, err := s.cfg.partitions.Open(rctx, Assignment{
		Partition:        p,
		Epoch:            epoch,
		Group:            s.cfg.group,
		TopicPartitions:  s.topicPartitions(rctx, cl, p.Topic),
		Cursors:          NewGroupCursorStore(cl, s.cfg.group),
		DeadLetter:       s.deadLetter,
		FlushDeadLetters: s.flushDeadLetters,
	})
	if err != nil {
		return nil, err
	}
	if last < -1 {
		return nil, fmt.Errorf("partition %s: restored offset %d is below -1", p, last)
	}
	w.h, w.lastOffset = h, last
	w.hctx, w.hcancel = context.WithCancel(context.WithoutCancel(ctx))
	return w, nil
}

// topicPartitions returns how many partitions topic has, asking the
// cluster once per topic (0 when it cannot say).
func (s *Source) topicPartitions(ctx context.Context, cl *kgo.Client, topic string) int {
	s.mu.Lock()
	n, ok := s.nparts[topic]
	s.mu.Unlock()
	if ok {
		return n
	}
	td, err := kadm.NewClient(cl).ListTopics(ctx, topic)
	if err != nil || td[topic].Err != nil {
		s.cfg.log.Warn("partition count unknown", "topic", topic, "err", errors.Join(err, td[topic].Err))
		return 0
	}
	n = len(td[topic].Partitions)
	s.mu.Lock()
	s.nparts[topic] = n
	s.mu.Unlock()
	return n
}

// openPartition builds the partition's checkpointers and restores its
// state from the store whose checkpoint has the later cursor (the local
// copy on a tie, or when the durable store has none).
func (s *Source) openPartition(ctx context.Context, cl *kgo.Client, p Partition, epoch streaming.Epoch) (*partition, error) {
	w := newPartition(s, p, epoch)
	shard := ShardName(s.cfg.group, p)
	owner := streaming.OwnershipFunc(func() (streaming.Epoch, bool) {
		since, ok := s.router.GainedAt(p)
		return w.epoch, ok && since == w.epoch
	})
	cpOpts := []streaming.CheckpointerOption{
		streaming.WithOwnership(owner),
		streaming.WithCheckpointLogger(s.cfg.log),
		streaming.WithCursorFormatter(formatCursor),
	}
	if s.cfg.graph != nil {
		cpOpts = append(cpOpts, streaming.WithOperators(s.cfg.graph.Operators()))
	}
	cpOpts = append(cpOpts, s.cfg.cpOpts...)
	w.durable = &cutSource{w: w, name: "durable"}
	cursors := s.cfg.cursors
	if cursors == nil {
		cursors = NewGroupCursorStore(cl, s.cfg.group)
	}
	var err error
	if w.durableCP, err = streaming.NewCheckpointer(shard, w.durable, s.cfg.durable, cursors, cpOpts...); err != nil {
		return nil, err
	}
	if s.cfg.local != nil {
		w.local = &cutSource{w: w, name: "local"}
		if w.localCP, err = streaming.NewCheckpointer(shard, w.local, s.cfg.local, nopCursorStore{}, cpOpts...); err != nil {
			return nil, err
		}
	}
	rctx, cancel := context.WithTimeout(ctx, s.cfg.restoreTimeout)
	defer cancel()
	dOff, dOK, err := peekCheckpoint(rctx, s.cfg.durable, shard)
	if err != nil {
		return nil, fmt.Errorf("durable store: %w", err)
	}
	if s.cfg.local != nil {
		lOff, lOK, lerr := peekCheckpoint(rctx, s.cfg.local, shard)
		if lerr == nil && lOK && (!dOK || lOff >= dOff) {
			if _, lerr = w.localCP.Restore(rctx); lerr == nil {
				s.stats.restoredLocal.Add(1)
				s.cfg.log.Info("partition restored", "partition", p.String(), "from", "local", "offset", lOff)
				return w, nil
			}
		}
		if lerr != nil {
			// The local copy is a cache: a broken one falls back to the
			// durable store, loudly.
			s.cfg.log.Warn("local checkpoint unusable, restoring from the durable store", "partition", p.String(), "err", lerr)
			w.local.saved.Store(0)
		}
	}
	if !dOK {
		s.stats.restoredEmpty.Add(1)
		return w, nil
	}
	if _, err := w.durableCP.Restore(rctx); err != nil {
		return nil, err
	}
	if w.local != nil {
		w.local.saved.Store(0) // the local store lags: its next cut is full
	}
	s.stats.restoredDurable.Add(1)
	s.cfg.log.Info("partition restored", "partition", p.String(), "from", "durable", "offset", dOff)
	return w, nil
}

// peekCheckpoint reads the offset recorded by shard's newest checkpoint
// manifest in store without restoring it (-1 for a checkpoint taken before
// any record).
func peekCheckpoint(ctx context.Context, store streaming.StateStore, shard string) (int64, bool, error) {
	snap, err := store.Load(ctx, []byte(shard+"/manifest"))
	if errors.Is(err, streaming.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("checkpoint manifest of %s: %w", shard, err)
	}
	if len(snap.Meta.Cursor) == 0 {
		return -1, true, nil
	}
	off, err := streaming.ParseKafkaOffset(snap.Meta.Cursor)
	if err != nil {
		return 0, false, fmt.Errorf("checkpoint manifest of %s: %w", shard, err)
	}
	return off.Offset, true, nil
}

func formatCursor(typ string, c []byte) string {
	if typ == streaming.CursorTypeKafka {
		if off, err := streaming.ParseKafkaOffset(c); err == nil {
			return off.String()
		}
	}
	return fmt.Sprintf("%s:%x", typ, c)
}

// adjustOffsets starts each restored partition right after its
// checkpoint's cursor, and a partition without a checkpoint at the start
// of the log: the group's committed offset is only a lag marker, the
// checkpoint is the truth.
func (s *Source) adjustOffsets(_ context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for t, ps := range offsets {
		for p := range ps {
			w := s.parts[Partition{t, p}]
			if w == nil {
				continue
			}
			if w.lastOffset >= 0 {
				ps[p] = kgo.NewOffset().At(w.lastOffset + 1).WithEpoch(-1)
			} else {
				ps[p] = kgo.NewOffset().AtStart()
			}
		}
	}
	return offsets, nil
}

func (s *Source) onRevoked(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	s.release(ctx, cl, toPartitions(m), true)
}

func (s *Source) onLost(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
	s.release(ctx, cl, toPartitions(m), false)
}

// release gives up partitions: stop each goroutine (queued records are
// dropped and counted), run the final checkpoint when revoking cleanly
// (bounded by the revoke timeout; on failure nothing is committed and the
// next owner replays from the last durable checkpoint), then drop
// ownership. A lost partition only refreshes the local copy: the group has
// already moved on, so a commit would be refused anyway.
func (s *Source) release(ctx context.Context, cl *kgo.Client, ps []Partition, final bool) {
	if len(ps) == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, p := range ps {
		s.mu.Lock()
		w := s.parts[p]
		s.mu.Unlock()
		if w == nil {
			continue
		}
		wg.Go(func() {
			w.halt()
			cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.revokeTimeout)
			defer cancel()
			if w.h != nil {
				if err := w.h.Release(cctx, final); err != nil {
					if final {
						s.stats.revokeFailed.Add(1)
					}
					s.cfg.log.Warn("releasing partition failed", "partition", p.String(), "final", final, "err", err)
				}
			} else if final {
				if err := s.checkpointPartition(cctx, w); err != nil {
					s.stats.revokeFailed.Add(1)
					s.cfg.log.Warn("final checkpoint failed; releasing without commit", "partition", p.String(), "err", err)
				}
			} else if w.localCP != nil {
				if _, err := w.localCP.Checkpoint(cctx); err != nil {
					s.cfg.log.Warn("local checkpoint of lost partition failed", "partition", p.String(), "err", err)
				}
			}
			s.mu.Lock()
			if s.parts[p] == w {
				delete(s.parts, p)
			}
			s.mu.Unlock()
		})
	}
	wg.Wait()
	gen := int32(-1)
	if cl != nil {
		_, gen = cl.GroupMetadata()
	}
	epoch := s.router.Revoke(gen, ps...)
	s.cfg.log.Info("partitions released", "group", s.cfg.group, "partitions", fmt.Sprint(ps), "final_checkpoint", final, "epoch", uint64(epoch))
}

// checkpointPartition runs the partition's durable checkpoint, then
// refreshes the local copy.
func (s *Source) checkpointPartition(ctx context.Context, w *partition) error {
	if _, err := w.durableCP.Checkpoint(ctx); err != nil {
		s.stats.checkpointFailures.Add(1)
		return &PartitionError{Partition: w.p, Op: "checkpoint", Err: err}
	}
	s.stats.checkpoints.Add(1)
	if w.localCP != nil {
		if _, err := w.localCP.Checkpoint(ctx); err != nil {
			s.cfg.log.Warn("local checkpoint failed", "partition", w.p.String(), "err", err)
		}
	}
	return nil
}

// Checkpoint checkpoints every owned partition (cut → flush outputs →
// save state → commit cursor) and returns the errors of those that
// failed. The hot path keeps running: each partition stalls only while
// its cut is encoded.
func (s *Source) Checkpoint(ctx context.Context) error {
	s.mu.Lock()
	ws := make([]*partition, 0, len(s.parts))
	for _, w := range s.parts {
		ws = append(ws, w)
	}
	s.mu.Unlock()
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, w := range ws {
		wg.Go(func() {
			if err := s.checkpointPartition(ctx, w); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// checkpointEvery checkpoints every owned partition each interval until
// ctx ends (WithCheckpointInterval).
func (s *Source) checkpointEvery(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := s.Checkpoint(ctx); err != nil && ctx.Err() == nil {
				s.cfg.log.Warn("periodic checkpoint failed", "err", err)
			}
		}
	}
}

// Checkpointer returns the durable checkpointer of an owned partition and
// the epoch it was gained at, for a checkpoint workflow that runs the
// stages one by one.
func (s *Source) Checkpointer(p Partition) (*streaming.Checkpointer, streaming.Epoch, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := s.parts[p]
	if w == nil {
		return nil, 0, false
	}
	return w.durableCP, w.epoch, true
}

// deadLetter sends a record that could not be decoded to the DLQ topic
// with headers naming where it came from and why; the stream continues.
func (s *Source) deadLetter(rec *kgo.Record, cause error) {
	s.stats.deadLettered.Add(1)
	s.mu.Lock()
	cl := s.cl
	s.mu.Unlock()
	dl := DeadLetter(s.cfg.dlqTopic(rec.Topic), s.cfg.group, rec, cause)
	s.cfg.log.Warn("record dead-lettered", "topic", rec.Topic, "partition", rec.Partition, "offset", rec.Offset, "dlq", dl.Topic, "err", cause)
	gen := s.dlqInflight.add()
	cl.Produce(context.Background(), dl, func(_ *kgo.Record, err error) {
		defer s.dlqInflight.done(gen)
		if err != nil {
			s.stats.deadLetterErrors.Add(1)
			e := fmt.Errorf("dead-letter %s/%d@%d to %q: %w", rec.Topic, rec.Partition, rec.Offset, dl.Topic, err)
			s.dlqErr.CompareAndSwap(nil, &e)
			s.cfg.log.Error("dead letter lost", "err", e)
		}
	})
}

// flushOutputs makes every output produced so far durable: the sinks and
// the dead letters. A dead letter that failed makes every later
// checkpoint fail (sticky): the cursor never moves past a record whose
// dead letter was lost, so a restart replays and re-sends it.
func (s *Source) flushOutputs(ctx context.Context) error {
	for _, f := range s.cfg.sinks {
		if err := f.Flush(ctx); err != nil {
			return fmt.Errorf("flush sink: %w", err)
		}
	}
	return s.flushDeadLetters(ctx)
}

// flushDeadLetters waits for the dead letters sent before the call (not
// for later ones) and returns the first one that failed (sticky).
func (s *Source) flushDeadLetters(ctx context.Context) error {
	s.mu.Lock()
	cl := s.cl
	s.mu.Unlock()
	if cl == nil {
		return nil
	}
	if err := flushBefore(ctx, cl, s.dlqInflight); err != nil {
		return fmt.Errorf("flush dead letters: %w", err)
	}
	if e := s.dlqErr.Load(); e != nil {
		return *e
	}
	return nil
}
