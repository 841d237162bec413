package pipeline

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/internal/lograte"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
	"github.com/tflo-io/tflo/workflows"
)

// Option is a deployment setting of Run: who runs the pipeline and what
// it talks to, as opposed to what the pipeline is.
type Option func(*options)

type options struct {
	workerID      string
	workerIDGiven bool // not the host name: a Kafka source's static member id
	log           *slog.Logger
	reg           prometheus.Registerer
	tc            client.Client
	controlWorker bool
	coord         coordination.Store
	registry      *streaming.Registry
	// checkpointed is told of each completed checkpoint (tests and
	// benchmarks: export_test.go).
	checkpointed func(streaming.ShardID, streaming.CheckpointStatus)
	// leaseWaits is told of each wait before a probe of Temporal after a
	// failed watch of the lease workflow (tests: export_test.go).
	leaseWaits func(time.Duration)
	// stalled is told of each stall an MQTT source's checkpointOnStall
	// checkpoints for, with the source's received and pending counts
	// (tests: export_test.go).
	stalled func(received uint64, pending int)
}

func defaultOptions() options {
	return options{log: slog.New(slog.DiscardHandler)}
}

// WithWorkerID names this worker process (default: the host name). With
// Temporal its activities run on workflows.WorkerTaskQueue(id) and its
// lease workflow is workflows.LeaseWorkflowID(id); in a coordination
// store it holds a presence lease for the id. Unique per process.
func WithWorkerID(id string) Option { return func(o *options) { o.workerID = id } }

// WithLogger sets the logger (default discards).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithMetrics registers the worker's Prometheus metrics with reg (default
// none); closing the worker unregisters them.
func WithMetrics(reg prometheus.Registerer) Option { return func(o *options) { o.reg = reg } }

// WithTemporal runs the slow path on Temporal through c (not closed by
// the worker): the worker announces the shards it gains to the pipeline's
// checkpoint coordinator (workflows.CoordinatorWorkflow, started by the
// first announcement) and serves its rounds, the handoff steps and its
// lease activity on its own task queue; with no round for
// Checkpoint.MaxCheckpointAge it checkpoints on its own. Default: no
// Temporal; the worker checkpoints in process every Checkpoint.Interval.
func WithTemporal(c client.Client) Option { return func(o *options) { o.tc = c } }

// WithControlWorker also runs tflo's workflows (workflows.ControlTaskQueue)
// in this process (default: another process does).
func WithControlWorker() Option { return func(o *options) { o.controlWorker = true } }

// WithCoordination registers the worker in a coordination store (NATS
// JetStream KV in production, coordination/memstore in one process)
// before it serves anything: a second live process with the same worker id
// is refused, and the presence lease is renewed by the worker's own
// goroutine, independent of Temporal. The caller closes the store after
// Run returns.
func WithCoordination(s coordination.Store) Option { return func(o *options) { o.coord = s } }

// WithOperators resolves the graph's operator types in r (default: the
// registry the spec was loaded with, WithRegistry, else DefaultRegistry).
func WithOperators(r *streaming.Registry) Option { return func(o *options) { o.registry = r } }

// Run runs p until ctx ends or the source fails, then drains (see
// Worker.Run). It is NewWorker and Worker.Run.
func Run(ctx context.Context, p Pipeline, opts ...Option) error {
	w, err := NewWorker(ctx, p, opts...)
	if err != nil {
		return err
	}
	return w.Run(ctx)
}

// Worker is one process running a pipeline. Create it with NewWorker, run
// it with Run, stop it with Close or by cancelling Run's context.
type Worker struct {
	c           *compiled
	o           options
	log         *slog.Logger
	db          *badger.DB
	durable     streaming.StateStore
	sinks       *sinkSet
	host        *host
	m           *metrics
	fingerprint string
	closers     []func() error
	// instance names this run of the worker id (this Worker: it runs
	// once) in its announcements and its lease workflow's worker-gone
	// notices, so a coordinator ignores a notice about an earlier run.
	instance string

	kafka *kafkaRunner // one of kafka, mqtt
	mqtt  *mqttRunner

	// dead is the dead-letter sink (Pipeline.DeadLetter, or the source's
	// default), deadLettered counts what the pipeline wrote to it (an
	// MQTT source counts its own) and dlqLog samples the per-record line.
	dead         *sinkSet
	deadLettered atomic.Uint64
	dlqLog       *lograte.Limiter
	// quarantineLog samples the quarantined keys' warnings, gcLog the
	// failed value-log GCs' (logValueLogGCErrors).
	quarantineLog *lograte.Limiter
	gcLog         *lograte.Limiter

	// The keyed runtimes of the shards held, which share State.Memory
	// (see newRuntime).
	budgetMu sync.Mutex
	runtimes map[*keyedstate.Runtime[string]]int // runtime → most shards its source gives a worker
	entrySz  int                                 // what a cached key costs, measured once by NewWorker
	pieceSz  int                                 // checkpoint piece size of the runtimes (pieceBytes)

	// The state of shards given up while running, being deleted from
	// the state database (dropState).
	dropMu     sync.Mutex
	drops      map[string]chan struct{} // state prefix → closed once deleted
	dropWG     sync.WaitGroup
	dropCtx    context.Context
	dropCancel context.CancelFunc
	stopping   atomic.Pointer[<-chan struct{}] // Run's ctx.Done(): a shard released after it is not dropped

	running     atomic.Bool
	closed      atomic.Bool
	crashOnStop atomic.Bool // tests: stop an MQTT source like a crash
	mu          sync.Mutex
	cancel      context.CancelFunc
	done        chan struct{}
	fatal       atomic.Pointer[error]
	member      atomic.Pointer[membership]
}

// NewWorker validates p, builds its graph, opens the state database, the
// durable store and the sinks, and builds the source. Sinks that talk to
// a server (Kafka) check it accepts the connection; the source connects
// in Run.
func NewWorker(ctx context.Context, p Pipeline, opts ...Option) (_ *Worker, err error) {
	o := defaultOptions()
	for _, f := range opts {
		f(&o)
	}
	if o.log == nil {
		return nil, errors.New("pipeline: nil logger")
	}
	o.workerIDGiven = o.workerID != ""
	if o.workerID == "" {
		if o.workerID, err = os.Hostname(); err != nil || o.workerID == "" {
			return nil, errors.New("pipeline: no worker id (WithWorkerID) and no host name")
		}
	}
	if (o.coord != nil || o.tc != nil) && !coordination.ValidKey(o.workerID) {
		return nil, fmt.Errorf("pipeline: worker id %q cannot name a lease: use letters, digits, '_', '=', '-' and '.' between tokens", o.workerID)
	}
	c, err := compile(p, o.registry)
	if err != nil {
		return nil, err
	}
	w := &Worker{c: c, o: o, log: o.log.With("pipeline", c.p.Name, "worker", o.workerID), done: make(chan struct{}),
		fingerprint: parquet.SchemaFingerprint(), instance: rand.Text(), sinks: &sinkSet{}, dlqLog: lograte.New(), quarantineLog: lograte.New(), gcLog: lograte.New(),
		// What a cached key costs, measured now, before the worker runs
		// anything: measured while shards run, it counts what their hot
		// paths allocate meanwhile (see keyedstate.EntryBytes). Every
		// shard runs the same graph.
		entrySz: keyedstate.EntryBytes[string](c.g),
		pieceSz: pieceBytes(c.p.State)}
	defer func() {
		if err != nil {
			w.closeAll()
		}
	}()
	if o.reg != nil {
		// Closed last: the collectors read the parts closed before.
		r := &registered{reg: o.reg}
		w.o.reg = r
		w.closers = append(w.closers, r.unregisterAll)
	}
	if w.db, err = openStateDB(c.p.State.Dir, int64(c.p.State.Memory)); err != nil {
		return nil, fmt.Errorf("pipeline %q: %w", c.p.Name, err)
	}
	w.closers = append(w.closers, w.db.Close)
	w.dropCtx, w.dropCancel = context.WithCancel(context.Background())
	w.closers = append(w.closers, w.stopDrops) // before the database closes
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	durable, closeDurable, err := openDurable(octx, c.p.State, w.db, w.log, w.partsReg())
	if err != nil {
		return nil, fmt.Errorf("pipeline %q: %w", c.p.Name, err)
	}
	w.durable = durable
	w.closers = append(w.closers, closeDurable)
	// Closed by Run after the drain; this closes them when Run never ran
	// (or one failed to open).
	w.closers = append(w.closers, func() error {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return w.closeSinks(cctx)
	})
	env := c.sinkEnv(w.log)
	for i, spec := range c.p.Sinks {
		s, err := spec.OpenSink(octx, env)
		if err != nil {
			return nil, fmt.Errorf("pipeline %q: sinks[%d]: %w", c.p.Name, i, err)
		}
		w.sinks.sinks = append(w.sinks.sinks, s)
	}
	if spec := c.p.deadLetter(); spec != nil {
		s, err := spec.OpenDeadLetterSink(octx, env)
		if err != nil {
			return nil, fmt.Errorf("pipeline %q: dead-letter sink: %w", c.p.Name, err)
		}
		w.dead = &sinkSet{sinks: []streaming.Sink{s}, dead: true}
	}
	w.host = &host{w: w, pipeline: c.p.Name, workerID: o.workerID, taskQueue: w.TaskQueue(), shards: activities.NewShards(),
		held: map[streaming.ShardID]*shard{}, released: map[streaming.ShardID]releasedShard{}}
	w.host.control = localControl{w}
	if o.tc != nil {
		w.host.control = newWorkflowControl(w, o.tc)
	}
	switch s := c.p.Source.(type) {
	case *KafkaSource:
		w.kafka, err = w.newKafkaRunner(s)
	case *MQTTSource:
		w.mqtt, err = w.newMQTTRunner(s)
	}
	if err != nil {
		return nil, fmt.Errorf("pipeline %q: %w", c.p.Name, err)
	}
	if w.m, err = newMetrics(w, w.o.reg); err != nil {
		return nil, fmt.Errorf("pipeline %q: metrics: %w", c.p.Name, err)
	}
	return w, nil
}

// TaskQueue returns the worker's own Temporal task queue.
func (w *Worker) TaskQueue() string { return workflows.WorkerTaskQueue(w.o.workerID) }

// Graph returns the graph every key runs.
func (w *Worker) Graph() *streaming.Graph { return w.c.g }

// Pipeline returns the pipeline the worker runs, defaults applied.
func (w *Worker) Pipeline() Pipeline { return w.c.p }

// Sinks returns the pipeline's open sinks, in the pipeline's order.
func (w *Worker) Sinks() []streaming.Sink { return w.sinks.sinks }

// Host returns the worker's activities.ShardHost (what the handoff and
// lease activities call).
func (w *Worker) Host() activities.ShardHost { return w.host }

// ShardStatus describes one shard a worker holds.
type ShardStatus struct {
	Shard streaming.ShardID
	Epoch streaming.Epoch
	// Restored is the checkpoint the shard was restored from when the
	// worker gained it (0: nothing was stored).
	Restored streaming.CheckpointID
	// Applied is the offset of the last record a Kafka shard applied or
	// dead-lettered (its cursor: after a restore, the checkpoint's, so a
	// replay moves it through the same offsets again); -1 before the
	// first, and for an MQTT shard.
	Applied    int64
	Checkpoint streaming.CheckpointStatus
	State      KeyedStats
}

// KeyedStats are the counters of a shard's keyed state.
type KeyedStats struct {
	Cached, Capacity int
	EntryBytes       int // the memory one cached key is counted at (the worker's shards share one measurement)
	Hits, Misses     uint64
	MemoryBytes      int64 // counted against the shard's budget
	BudgetBytes      int64
	// RestoredKeys is how many states the shard's restore wrote, and
	// RestoreCompaction how long it then spent compacting the state
	// database (keyedstate.Stats: 0 when the restore was smaller than a
	// memtable and skipped it).
	RestoredKeys      uint64
	RestoreCompaction time.Duration
}

// Shards lists the shards the worker holds now, sorted.
func (w *Worker) Shards() []ShardStatus {
	var out []ShardStatus
	for _, s := range w.shards() {
		ks := s.rt.Stats()
		out = append(out, ShardStatus{Shard: s.id, Epoch: s.epoch, Restored: streaming.CheckpointID(s.restored.CheckpointID),
			Applied: cursorOffset(s.rt.Cursor()), Checkpoint: s.cp.Status(),
			State: KeyedStats{Cached: ks.Cached, Capacity: ks.Capacity, EntryBytes: ks.EntryBytes, Hits: ks.Hits, Misses: ks.Misses,
				MemoryBytes: ks.BadgerBytes + ks.CacheBytes + ks.ChangedBytes, BudgetBytes: ks.Budget,
				RestoredKeys: ks.RestoredItems, RestoreCompaction: ks.RestoreCompaction}})
	}
	return out
}

// shards returns every shard the worker holds.
func (w *Worker) shards() []*shard { return w.host.heldShards() }

// Checkpoint checkpoints every shard the worker holds now, in parallel,
// and returns the errors of those that failed.
func (w *Worker) Checkpoint(ctx context.Context) error {
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for _, s := range w.shards() {
		wg.Go(func() {
			if _, err := s.cp.Checkpoint(ctx); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("shard %s: %w", s.id, err))
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Stats are a worker's counters.
type Stats struct {
	RecordsIn, RecordsOut          uint64
	DeadLettered, DeadLetterErrors uint64
	Dropped                        uint64 // records of shards no longer owned
	Duplicates                     uint64 // MQTT redeliveries dropped by the dedup window
	Owned                          int    // shards held
	Subscribed                     bool   // an MQTT source subscribed at least once
	LastEventTS                    int64  // newest event time applied (ns)
	Checkpoints                    uint64 // completed checkpoints of every shard, since the worker started
	// Hostile keys (State.MaxKeys, State.KeyTTL, quarantine), since the
	// worker started.
	KeysQuarantined, KeysRefused, KeysExpired uint64
	// RestoresBehindGroup counts the Kafka shards restored from a
	// checkpoint older than the group's committed offset (logged as a
	// warning: the durable store lacks checkpoints the group committed).
	RestoresBehindGroup uint64
}

// Stats returns the worker's counters.
func (w *Worker) Stats() Stats {
	ss := w.sourceStats()
	st := Stats{RecordsIn: w.m.recordsIn.Load(), RecordsOut: w.m.recordsOut.Load(), DeadLettered: ss.DeadLettered,
		DeadLetterErrors: ss.DeadLetterErrors, Dropped: ss.Dropped, Duplicates: ss.Duplicates, Owned: ss.Owned, LastEventTS: w.m.maxTS.Load(), Checkpoints: w.m.completed.Load()}
	st.KeysQuarantined, st.KeysRefused, st.KeysExpired = w.m.quarantined.Load(), w.m.keysRefused.Load(), w.m.expired.Load()
	st.RestoresBehindGroup = w.m.behindGroup.Load()
	if w.mqtt != nil {
		st.Subscribed = w.mqtt.subscribed()
	}
	return st
}

func (w *Worker) sourceStats() sourceStats {
	switch {
	case w.kafka != nil:
		return w.kafka.stats()
	case w.mqtt != nil:
		return w.mqtt.stats()
	}
	return sourceStats{}
}

// closeSinks closes the sinks and the dead-letter sink, once.
func (w *Worker) closeSinks(ctx context.Context) error {
	err := w.sinks.close(ctx)
	if w.dead != nil {
		err = errors.Join(err, w.dead.close(ctx))
	}
	return err
}

// deadLetter writes the dead letters of a shard's chunk (outs, each
// carrying a streaming.DeadLetter) to the dead-letter sink, counting and
// logging them (a sample: a stream of bad records must not flood the
// log). A failed write fails the shard's next checkpoint, as any sink's;
// one that failed once ctx ended is returned (sinkSet.write).
func (w *Worker) deadLetter(ctx context.Context, outs []streaming.Output) error {
	if len(outs) == 0 || w.dead == nil {
		return nil
	}
	for _, o := range outs {
		if ok, skipped := w.dlqLog.Allow(); ok {
			w.log.Warn("record dead-lettered", lograte.With(skipped, "topic", o.Topic, "shard", o.Shard, "offset", o.Offset, "err", o.Dead.Err)...)
		}
	}
	if err := w.dead.write(ctx, outs); err != nil {
		return err
	}
	w.deadLettered.Add(uint64(len(outs)))
	return nil
}

// deadLetterErrors is how many dead letters the dead-letter sink lost,
// when it counts them.
func (w *Worker) deadLetterErrors() uint64 {
	if w.dead == nil {
		return 0
	}
	if f, ok := w.dead.sinks[0].(interface{ Failed() uint64 }); ok {
		return f.Failed()
	}
	return 0
}

// Err implements activities.LeaseKeeper: nil while the worker runs and
// (with a coordination store) its presence lease is renewed; the source's
// fatal error once it failed, or the coordination worker's error once its
// leases expired (no renewal landed for a lease TTL).
func (w *Worker) Err() error {
	if e := w.fatal.Load(); e != nil {
		return *e
	}
	if m := w.member.Load(); m != nil {
		if err := m.sw.Err(); err != nil {
			return fmt.Errorf("worker %q: coordination: %w", w.o.workerID, err)
		}
	}
	return nil
}

// RegisterWorkflows registers tflo's workflows on a control-queue worker
// (workflows.Register: the checkpoint coordinator, handoff, lease and
// backfill, pinned when the worker is versioned).
func RegisterWorkflows(r worker.WorkflowRegistry) { workflows.Register(r) }

// Run consumes the source and serves the slow path until ctx ends, Close
// is called or the source fails. It then drains: a Kafka source leaves
// the group after each owned partition's final checkpoint (an MQTT source
// takes its final checkpoint), the sinks are flushed and closed, the
// Temporal workers stop (the lease workflow ends as stopped, not dead),
// the presence lease is withdrawn and the state database closed. It
// returns nil after a requested stop whose final checkpoints succeeded
// (else their errors, each naming its shard). Run may be called once.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return ErrClosed
	}
	defer close(w.done)
	defer w.closeAll()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.mu.Lock()
	w.cancel = cancel
	w.mu.Unlock()
	if w.closed.Load() {
		cancel()
	}

	m, err := w.join(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil // stopped while registering: nothing was served
		}
		return err
	}
	w.member.Store(m)
	defer m.stop() // after the Temporal workers (deferred below) stopped

	tc := w.o.tc
	if tc != nil {
		defer w.startTemporalLazily(ctx, tc)()
	}

	done := ctx.Done()
	w.stopping.Store(&done)
	srcDone := make(chan error, 1)
	go func() {
		if w.kafka != nil {
			srcDone <- w.kafka.run(ctx)
		} else {
			srcDone <- w.mqtt.run(ctx)
		}
	}()
	ctlCtx, ctlCancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Go(func() { w.host.control.run(ctlCtx) })
	if ttl := w.c.p.State.KeyTTL; ttl > 0 {
		bg.Go(func() { w.expireEvery(ctlCtx, ttl) })
	}
	w.log.Info("pipeline worker running", "task_queue", w.TaskQueue(), "temporal", tc != nil)

	var twin <-chan struct{} // the coordination worker stopped on its own: a twin took our id
	if m != nil {
		twin = m.sw.Stopped()
	}
	// A failed sink write: the sink's outputs have a hole, so no later
	// checkpoint of any shard can commit. Stop (the final checkpoints
	// fail too) rather than run on without checkpoints: a restart
	// replays from the last checkpoint and fills the hole.
	var deadFailed <-chan struct{}
	if w.dead != nil {
		deadFailed = w.dead.Failed()
	}
	stopOn := func(why error, msg string) {
		err = why
		w.log.Error(msg, "err", err)
		cancel()
		if serr := <-srcDone; serr != nil {
			err = errors.Join(err, serr)
		}
	}
	select {
	case <-ctx.Done():
		err = <-srcDone
	case err = <-srcDone:
	case <-twin:
		stopOn(fmt.Errorf("coordination: %w", m.sw.Err()), "another process took this worker id in the coordination store; stopping")
	case <-w.sinks.Failed():
		stopOn(w.sinks.Err(), "a sink write failed; stopping: a restart replays from the last checkpoint")
	case <-deadFailed:
		stopOn(w.dead.Err(), "a dead-letter sink write failed; stopping: a restart replays from the last checkpoint")
	}
	if err != nil {
		w.fatal.Store(&err)
	}
	// The source has stopped: every shard's final checkpoint ran.
	ctlCancel()
	bg.Wait()
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer ccancel()
	if cerr := w.closeSinks(cctx); cerr != nil {
		w.log.Warn("closing sinks", "err", cerr)
	}
	if err != nil {
		// Logged once, by whoever receives it (the worker main: at ERROR).
		return fmt.Errorf("pipeline %q, worker %q: %w", w.c.p.Name, w.o.workerID, err)
	}
	w.log.Info("pipeline worker stopped")
	return nil
}

// startTemporalLazily starts the Temporal workers (startTemporal) in the
// background, retrying with backoff while Temporal is unreachable: the
// hot path does not wait for the slow path, and the shards checkpoint on
// their own meanwhile (the control plane's local checkpoints). stop
// stops the retries, then what was started.
func (w *Worker) startTemporalLazily(ctx context.Context, tc client.Client) (stop func()) {
	var (
		mu      sync.Mutex
		stopTW  func()
		done    = make(chan struct{})
		backoff = time.Second
	)
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			s, err := w.startTemporal(ctx, tc)
			if err == nil {
				mu.Lock()
				stopTW = s
				mu.Unlock()
				w.log.Info("temporal workers started", "task_queue", w.TaskQueue())
				return
			}
			if ctx.Err() != nil {
				return
			}
			w.log.Warn("starting the temporal workers failed (Temporal unreachable?); the shards checkpoint locally meanwhile; will retry",
				"err", err, "in", backoff)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 30*time.Second)
		}
	}()
	return func() {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		if stopTW != nil {
			stopTW()
		}
	}
}

// startTemporal starts the worker's activity worker (and the control
// worker with WithControlWorker) and its supervised lease workflow; stop
// stops them in order.
func (w *Worker) startTemporal(ctx context.Context, tc client.Client) (stop func(), err error) {
	hb := w.c.p.Checkpoint.HeartbeatTimeout
	// The stop timeout lets the lease activity report its completion.
	// Heartbeats reach the server every third of the heartbeat timeout
	// instead of the SDK's default 80% of it, so a Temporal outage of up
	// to two thirds of it never makes the lease workflow declare this
	// worker dead.
	aw := worker.New(tc, w.TaskQueue(), worker.Options{WorkerStopTimeout: 10 * time.Second, MaxHeartbeatThrottleInterval: hb / 3})
	aw.RegisterActivity(&activities.Rounds{Host: w.host.shards})
	aw.RegisterActivity(&activities.Handoffs{Host: w.host})
	aw.RegisterActivity(&leases{activities.Leases{Host: w.host, Keeper: w}})
	tws := []worker.Worker{aw}
	if w.o.controlWorker {
		// A workflow task of a workflow this process ran last goes to its
		// sticky queue first; when the process was killed, the task waits
		// there this long before any other control worker gets it (the
		// SDK's default, 5s, delayed a dead worker's takeover past its
		// bound when the coordinator's last task ran in that worker).
		cw := worker.New(tc, workflows.ControlTaskQueue, worker.Options{StickyScheduleToStartTimeout: time.Second})
		RegisterWorkflows(cw)
		tws = append(tws, cw)
	}
	for i, tw := range tws {
		if err := tw.Start(); err != nil {
			for j := i - 1; j >= 0; j-- {
				tws[j].Stop()
			}
			return nil, fmt.Errorf("worker %q: start temporal worker: %w", w.o.workerID, err)
		}
	}
	lease := &leaseSupervisor{}
	stopWorkers := func() {
		// Activity worker first: the lease activity completes. Then the
		// stop signal, for a lease activity that had not started yet
		// (without it the workflow would read the stop as death). A
		// control worker in this process then lets the lease workflow
		// finish before it stops too.
		tws[0].Stop()
		if run := lease.current(); run != nil {
			w.stopLease(tc, run)
		}
		if len(tws) > 1 {
			if run := lease.current(); run != nil {
				wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
				if err := run.Get(wctx, nil); err != nil {
					w.log.Warn("lease workflow did not finish", "err", err)
				}
				wcancel()
			}
			tws[1].Stop()
		}
	}
	run, err := w.startLease(ctx, tc)
	if err != nil {
		stopWorkers()
		return nil, err
	}
	lease.set(run)
	sctx, scancel := context.WithCancel(ctx)
	lease.wg.Go(func() { w.superviseLease(sctx, tc, lease) })
	return func() {
		scancel()
		lease.wg.Wait()
		stopWorkers()
	}, nil
}

// Close stops Run (gracefully, see Run) and waits for it. Idempotent; a
// Worker that never ran is released at once.
func (w *Worker) Close() error {
	w.closed.Store(true)
	if w.running.CompareAndSwap(false, true) {
		close(w.done)
		w.closeAll()
		return nil
	}
	w.mu.Lock()
	cancel := w.cancel
	w.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	<-w.done
	return nil
}

// Done is closed when Run has returned.
func (w *Worker) Done() <-chan struct{} { return w.done }

func (w *Worker) closeAll() {
	w.mu.Lock()
	cs := w.closers
	w.closers = nil
	w.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		if err := cs[i](); err != nil {
			w.log.Warn("close", "err", err)
		}
	}
}

// ErrClosed is returned by Run after Close, or when Run is called twice.
var ErrClosed = errors.New("pipeline worker closed")
