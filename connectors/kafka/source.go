package kafka

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/tflo-io/tflo/streaming"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Source is one consumer-group member handing the partitions it owns to a
// runtime (Partitions). Create it with NewSource, run it with Run (which
// blocks), stop it with Close or by cancelling Run's context; both leave
// the group after every owned partition's Release.
type Source struct {
	cfg    sourceConfig
	router *ShardRouter

	mu     sync.Mutex // guards parts, had, cl, cancel, fatal, nparts, leaveErrs
	parts  map[Partition]*partition
	had    map[Partition]bool // every partition the member has owned
	nparts map[string]int     // partition count per topic, once known
	cl     *kgo.Client
	cancel context.CancelFunc
	fatal  error
	// leaving: Run is leaving the group (its revokes are the member's
	// last releases); leaveErrs are those whose final checkpoint failed,
	// which Run returns.
	leaving   atomic.Bool
	leaveErrs []error
	running   atomic.Bool
	closed    atomic.Bool
	runDone   chan struct{}

	stats struct {
		handed, revokeFailed atomic.Uint64
	}
	// assigned: the member received an assignment, possibly empty (a
	// member of a group with more members than partitions gets none).
	assigned atomic.Bool
	// polled, when set (tests), sees each poll's records before they are
	// handed over.
	polled func(kgo.Fetches)
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
	return &Source{cfg: cfg, router: NewShardRouter(), parts: map[Partition]*partition{}, had: map[Partition]bool{}, nparts: map[string]int{},
		runDone: make(chan struct{})}, nil
}

// Router returns the member's shard router.
func (s *Source) Router() *ShardRouter { return s.router }

// Stats is a snapshot of the Source's counters.
type Stats struct {
	Applied        uint64 // records handed to the partitions' handlers
	Dropped        uint64 // records dropped because their partition was no longer owned
	RevokeFailures uint64 // revoked partitions whose Release (final checkpoint) failed
	Owned          int
	Epoch          streaming.Epoch // 0 until the member gains a partition
	// Assigned: the member is in the group with its assignment, even an
	// empty one (more members than partitions): from its first
	// assignment until a lost session (it rejoins; the next assignment
	// sets it again).
	Assigned bool
}

// Stats returns the Source's counters.
func (s *Source) Stats() Stats {
	return Stats{
		Applied:        s.stats.handed.Load(),
		Dropped:        s.router.Dropped(),
		RevokeFailures: s.stats.revokeFailed.Load(),
		Owned:          len(s.router.Owned()),
		Epoch:          s.router.AssignmentEpoch(),
		Assigned:       s.assigned.Load(),
	}
}

// Lag returns the consumer lag in records of every partition the member
// has open: the partition's high watermark, as the last fetch response
// reported it, minus the offset after the last record handed to its
// handler. A partition no fetch has answered for yet is left out. It costs
// no request: the numbers come with the fetches the member makes anyway.
func (s *Source) Lag() map[Partition]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[Partition]int64, len(s.parts))
	for p, w := range s.parts {
		if hwm := w.hwm.Load(); hwm >= 0 {
			out[p] = max(hwm-w.next.Load(), 0)
		}
	}
	return out
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
// opened, a handler's error, a batch that decompresses past kgo's
// MaxDecompressBatchBytes, which kgo will not fetch again). On the way out
// it leaves the group, which revokes every owned partition and releases it
// (its final checkpoint). It returns nil on a requested stop whose final
// checkpoints all succeeded, else the failed or skipped ones' errors (a
// *PartitionError each, naming the partition; skipped: a partition the
// client closed without revoking). Run may be called once.
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
	// Close cancels ctx from here on: also the connect check, which may
	// wait for brokers that do not answer.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.mu.Lock()
	s.cancel = cancel
	s.mu.Unlock()
	if s.closed.Load() {
		cancel()
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
	opts = append(opts, s.cfg.groupOpts()...)
	opts = append(opts, s.cfg.kgoOpts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	s.mu.Lock()
	s.cl = cl
	s.mu.Unlock()

	for ctx.Err() == nil {
		// The ownerships gained from here on may get records polled for
		// an earlier one (hand).
		since := s.router.AssignmentEpoch()
		fetches := cl.PollRecords(ctx, s.cfg.maxPoll)
		if fetches.IsClientClosed() {
			break
		}
		if s.polled != nil {
			s.polled(fetches)
		}
		fetches.EachError(func(t string, p int32, err error) {
			if errors.Is(err, context.Canceled) {
				return
			}
			if isAuthError(err) {
				s.fail(fmt.Errorf("%s: %w: %v", who, ErrAuthentication, err))
				return
			}
			if errors.Is(err, kerr.FencedInstanceID) {
				s.fail(fmt.Errorf("%s: another member joined with instance id %q: give every worker its own id: %w", who, s.cfg.instanceID, ErrFencedInstance))
				return
			}
			if errors.Is(err, kerr.GroupAuthorizationFailed) { // an ACL: every join would be refused alike
				s.fail(fmt.Errorf("%s: the brokers do not authorize this member's user for the group: %w", who, err))
				return
			}
			if errors.Is(err, kerr.TopicAuthorizationFailed) { // an ACL: every refresh would be refused alike
				s.fail(fmt.Errorf("%s: the brokers do not authorize this member's user for topic %q: %w", who, t, err))
				return
			}
			if errors.Is(err, kerr.InvalidSessionTimeout) { // every join would be refused alike
				s.fail(fmt.Errorf("%s: the brokers refuse session timeout %v (outside their group.min/max.session.timeout.ms): %w", who, cl.OptValue(kgo.SessionTimeout), err))
				return
			}
			if tl, ok := errors.AsType[*kgo.ErrDecompressTooLarge](err); ok {
				// kgo fetches the partition no more: it would stall
				// silently behind the batch (only this warning said so).
				limit, _ := cl.OptValue(kgo.MaxDecompressBatchBytes).(int)
				s.fail(&PartitionError{Partition: Partition{tl.Topic, tl.Partition}, Op: "fetch", Err: fmt.Errorf(
					"the batch at offsets %d to %d decompresses to more than %d bytes (kgo.MaxDecompressBatchBytes; raise it with WithClientOptions) and cannot be consumed: %w",
					tl.Offset, tl.NextOffset-1, limit, err)})
				return
			}
			s.cfg.log.Warn("kafka fetch error", "topic", t, "partition", p, "err", err)
		})
		s.hand(ctx, cl, fetches, since)
	}
	// Leaving the group revokes every owned partition: their Releases
	// (final checkpoints) run inside Close.
	cancel()
	s.leaving.Store(true)
	cl.Close()
	s.mu.Lock()
	left := make([]*partition, 0, len(s.parts))
	for _, w := range s.parts {
		left = append(left, w)
	}
	clear(s.parts)
	errs := append([]error{s.fatal}, s.leaveErrs...)
	s.mu.Unlock()
	var skipped []Partition
	for _, w := range left {
		w.halt()
		// Not revoked by the group: franz-go's Close revokes every
		// partition the client holds as it leaves (or reported it lost
		// before), so the client no longer held this one. It is closed:
		// nothing may be committed any more, the final checkpoint is
		// skipped and the next owner replays from the last durable one.
		// The stop is not clean: Run says so, naming the partition.
		skipped = append(skipped, w.p)
		errs = append(errs, &PartitionError{Partition: w.p, Op: "final release of",
			Err: errors.New("the client closed without revoking it: final checkpoint skipped (the next owner replays from the last durable checkpoint)")})
		if err := w.h.Release(context.Background(), false); err != nil {
			s.cfg.log.Warn("releasing partition failed", "partition", w.p.String(), "err", err)
		}
	}
	if len(skipped) > 0 {
		s.cfg.log.Warn("partitions closed without a revoke: final checkpoint skipped", "group", s.cfg.group, "partitions", fmt.Sprint(skipped))
	}
	return errors.Join(errs...)
}

// hand hands one poll's records to their partitions' goroutines. Each
// goroutine is looked up before any record is handed over: a hand-over
// may wait (a full queue) while another polled partition is revoked and
// gained again, and what was polled for the earlier ownership must not
// reach the later one, which resumes after its restored checkpoint and
// fetches those records again.
//
// The lookup itself may come after such a change: franz-go runs the
// group's callbacks while the poll loop holds a poll. since is the router
// epoch before the poll began: a partition the member owned before and
// gained again after it (w.epoch > since) may have records polled for the
// earlier ownership (taken before its revoke or lost session, past that
// ownership's dropped queue) or the new one's first ones, which cannot be
// told apart. They are not handed over: cl fetches the partition again
// from where the new ownership resumes (SetOffsets, under s.mu: a later
// ownership, which onAssigned publishes under it, is never moved).
func (s *Source) hand(ctx context.Context, cl *kgo.Client, fetches kgo.Fetches, since streaming.Epoch) {
	type polled struct {
		ft kgo.FetchTopicPartition
		w  *partition
	}
	var ps []polled
	var refetch map[string]map[int32]kgo.EpochOffset
	s.mu.Lock()
	fetches.EachPartition(func(ft kgo.FetchTopicPartition) {
		w := s.parts[Partition{ft.Topic, ft.Partition}]
		if w != nil && w.regained && w.epoch > since && !w.stopping.Load() && len(ft.Records) > 0 {
			if refetch == nil {
				refetch = map[string]map[int32]kgo.EpochOffset{}
			}
			if refetch[ft.Topic] == nil {
				refetch[ft.Topic] = map[int32]kgo.EpochOffset{}
			}
			refetch[ft.Topic][ft.Partition] = kgo.EpochOffset{Epoch: -1, Offset: w.lastOffset + 1}
			ft.Records = nil
		}
		ps = append(ps, polled{ft, w})
	})
	if len(refetch) > 0 && cl != nil {
		cl.SetOffsets(refetch)
		s.cfg.log.Debug("records polled before the partitions were gained: fetching them again from the restored offsets",
			"group", s.cfg.group, "offsets", fmt.Sprint(refetch))
	}
	s.mu.Unlock()
	for _, p := range ps {
		ft, w := p.ft, p.w
		if w != nil && ft.Err == nil {
			w.hwm.Store(ft.HighWatermark)
		}
		if len(ft.Records) == 0 {
			continue
		}
		if w == nil || w.stopping.Load() {
			s.router.CountDropped(len(ft.Records))
			continue
		}
		select {
		case w.in <- ft.Records:
		case <-w.stop:
			s.router.CountDropped(len(ft.Records))
		case <-ctx.Done():
			s.router.CountDropped(len(ft.Records)) // shutting down: never handed over
		}
	}
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
		// franz-go calls this after every join, with nothing new too:
		// the member is in the group, idle when it owns nothing.
		s.assigned.Store(true)
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
				if err := stale.h.Release(ctx, false); err != nil {
					s.cfg.log.Warn("releasing partition failed", "partition", p.String(), "err", err)
				}
			}
			w, err := s.open(ctx, cl, p, epoch)
			if err != nil {
				s.fail(&PartitionError{Partition: p, Op: "open", Err: err})
				return
			}
			s.mu.Lock()
			w.regained = s.had[p]
			s.had[p] = true
			s.parts[p] = w
			s.mu.Unlock()
			go w.run()
		})
	}
	wg.Wait()
	s.assigned.Store(true)
	s.cfg.log.Info("partitions assigned", "group", s.cfg.group, "partitions", fmt.Sprint(ps), "generation", gen, "epoch", uint64(epoch))
}

// open opens p through the runtime: it restores the partition's state and
// says where to resume.
func (s *Source) open(ctx context.Context, cl *kgo.Client, p Partition, epoch streaming.Epoch) (*partition, error) {
	rctx, cancel := context.WithTimeout(ctx, s.cfg.restoreTimeout)
	defer cancel()
	h, last, err := s.cfg.partitions.Open(rctx, Assignment{
		Partition:       p,
		Epoch:           epoch,
		Group:           s.cfg.group,
		TopicPartitions: s.topicPartitions(rctx, cl, p.Topic),
		Cursors:         NewGroupCursorStore(cl, s.cfg.group),
	})
	if err != nil {
		return nil, err
	}
	if last < -1 {
		_ = h.Release(ctx, false)
		return nil, fmt.Errorf("partition %s: restored offset %d is below -1", p, last)
	}
	return newPartition(s, p, epoch, h, last), nil
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

// adjustOffsets starts each opened partition right after the offset its
// restored state ends at, and a partition without one at the start of the
// log: the group's committed offset is only a lag marker, the checkpoint
// is the truth.
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
	// The session is gone: the member rejoins, and is not assigned until
	// the group says so again (Ready: it serves nothing meanwhile).
	s.assigned.Store(false)
	s.release(ctx, cl, toPartitions(m), false)
}

// release gives up partitions: stop each goroutine (queued records are
// dropped and counted), release it to the runtime — on a clean revoke
// with its final checkpoint, bounded by the revoke timeout (on failure
// nothing is committed and the next owner replays from the last durable
// checkpoint) — then drop ownership. A lost partition is released without
// a final checkpoint: the group has moved on, a commit would be refused.
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
			if err := w.h.Release(cctx, final); err != nil {
				if final {
					s.stats.revokeFailed.Add(1)
					if s.leaving.Load() {
						// The member's last checkpoint of p failed: the stop
						// must not look clean (Run returns it).
						s.mu.Lock()
						s.leaveErrs = append(s.leaveErrs, &PartitionError{Partition: p, Op: "final release of", Err: err})
						s.mu.Unlock()
					}
				}
				s.cfg.log.Warn("releasing partition failed", "partition", p.String(), "final", final, "err", err)
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
