package central

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/influx"
	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/streaming"
	badgerstore "github.com/tflo-io/tflo/streaming/state/badger"
	"github.com/tflo-io/tflo/workers/edge"
	"github.com/tflo-io/tflo/workflows"
)

// Option supplies what a Config cannot serialize.
type Option func(*options)

type options struct {
	log       *slog.Logger
	reg       prometheus.Registerer
	durable   streaming.StateStore
	sinks     []Sink
	tc        client.Client
	kafkaOpts []kafka.SourceOption
	watch     time.Duration
	coord     coordination.Store
}

func defaultOptions() options {
	return options{log: slog.New(slog.DiscardHandler), watch: 50 * time.Millisecond}
}

// WithLogger sets the logger (default discards).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithRegisterer registers the worker's Prometheus metrics with reg
// (default: none registered).
func WithRegisterer(reg prometheus.Registerer) Option { return func(o *options) { o.reg = reg } }

// WithDurableStore sets the durable StateStore checkpoints go to and the
// next owner of a partition restores from (S3 in production). Badger at
// Config.State.Dir then holds the local copy. Default: Badger at
// Config.State.Dir is the durable store, which suits one machine only.
func WithDurableStore(s streaming.StateStore) Option { return func(o *options) { o.durable = s } }

// WithSinks adds sinks beside the configured Influx and archive sinks.
func WithSinks(s ...Sink) Option { return func(o *options) { o.sinks = append(o.sinks, s...) } }

// WithTemporalClient uses c instead of dialing Config.Temporal (Run does
// not close it). Config.Temporal.ControlWorker still applies.
func WithTemporalClient(c client.Client) Option { return func(o *options) { o.tc = c } }

// WithKafkaOptions adds connectors/kafka Source options (dialers, raw kgo
// options, security).
func WithKafkaOptions(opts ...kafka.SourceOption) Option {
	return func(o *options) { o.kafkaOpts = append(o.kafkaOpts, opts...) }
}

// WithWatchInterval sets how often the host compares its shards with the
// Kafka router (default 50ms).
func WithWatchInterval(d time.Duration) Option { return func(o *options) { o.watch = d } }

// Worker is one central worker process. Create it with New, run it with
// Run, stop it with Close or by cancelling Run's context.
type Worker struct {
	cfg    Config
	o      options
	log    *slog.Logger
	graph  *streaming.Graph
	src    *kafka.Source
	shards *activities.Shards
	host   *Host
	m      *metrics
	sinks  *sinkSet
	scale  int64

	local   *badgerstore.Store // nil when none
	closers []func() error

	running atomic.Bool
	closed  atomic.Bool
	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan struct{}
	fatal   atomic.Pointer[error]
	member  atomic.Pointer[membership] // nil without a coordination store
}

// New validates cfg, opens the local Badger database, builds the sinks
// and the Kafka source. It does not connect anywhere: Run does.
func New(cfg Config, opts ...Option) (*Worker, error) {
	cfg.applyDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	o := defaultOptions()
	for _, f := range opts {
		f(&o)
	}
	if o.log == nil || o.watch <= 0 {
		return nil, errors.New("central worker: nil logger or non-positive watch interval")
	}
	if o.coord != nil && !coordination.ValidKey(cfg.WorkerID) {
		return nil, fmt.Errorf("central config: worker_id %q cannot name a coordination lease: use letters, digits, '_', '=', '-' and '.' between tokens", cfg.WorkerID)
	}
	if o.durable == nil && cfg.State.Dir == "" {
		return nil, errors.New("central config: state.dir is empty and no durable store was given: checkpoints would have nowhere to go")
	}
	g, err := Graph(cfg.Graph)
	if err != nil {
		return nil, fmt.Errorf("central worker: graph: %w", err)
	}
	scale, _ := tsScale(cfg.Graph.TSUnit)
	w := &Worker{cfg: cfg, o: o, log: o.log.With("worker", cfg.WorkerID), graph: g, shards: activities.NewShards(), scale: scale, done: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			w.closeAll()
		}
	}()

	durable := o.durable
	if cfg.State.Dir != "" {
		w.local, err = badgerstore.Open(badgerstore.WithPath(cfg.State.Dir))
		if err != nil {
			return nil, fmt.Errorf("central worker: %w", err)
		}
		w.closers = append(w.closers, w.local.Close)
		if durable == nil {
			durable = w.local
		}
	}

	w.sinks = &sinkSet{}
	if cfg.Influx.URL != "" {
		is, err := influx.NewSink(cfg.Influx.URL, cfg.Influx.Bucket, influx.WithToken(cfg.Influx.token()), influx.WithOrg(cfg.Influx.Org), influx.WithLogger(w.log))
		if err != nil {
			return nil, fmt.Errorf("central worker: %w", err)
		}
		w.sinks.sinks = append(w.sinks.sinks, NewInfluxSink(is))
	}
	if cfg.Archive.Dir != "" {
		la, err := parquet.NewLocalArchive(cfg.Archive.Dir)
		if err != nil {
			return nil, fmt.Errorf("central worker: archive: %w", err)
		}
		as, err := NewArchiveSink(la, cfg.Pipeline)
		if err != nil {
			return nil, fmt.Errorf("central worker: %w", err)
		}
		w.sinks.sinks = append(w.sinks.sinks, as)
	}
	w.sinks.sinks = append(w.sinks.sinks, o.sinks...)

	var dec kafka.Decoder = kafka.JSONReadingDecoder{}
	if cfg.Kafka.Input == InputSignals {
		dec = kafka.DecoderFunc(decodeEdgeSignal)
	}
	dlq := cfg.Kafka.DLQTopic
	kopts := []kafka.SourceOption{
		kafka.WithBrokers(cfg.Kafka.Brokers...),
		kafka.WithGroup(cfg.Kafka.Group),
		kafka.WithTopics(cfg.Kafka.Topic),
		kafka.WithGraph(g),
		kafka.WithDecoder(dec),
		kafka.WithLimits(streaming.Limits{TSUnit: time.Duration(w.scale)}), // ts_unit: the check's bounds and ts × scale agree
		kafka.WithStateStore(durable),
		kafka.WithDeadLetterTopic(func(string) string { return dlq }),
		kafka.WithRevokeTimeout(cfg.Kafka.RevokeTimeout.D()),
		kafka.WithLogger(w.log),
		kafka.WithOnApply(w.onApply),
		kafka.WithSinks(w.sinks),
		kafka.WithCheckpointerOptions(streaming.WithSchemaFingerprint(parquet.SchemaFingerprint())),
	}
	if o.durable != nil && w.local != nil {
		kopts = append(kopts, kafka.WithLocalStateStore(w.local))
	}
	if d := cfg.Kafka.SessionTimeout.D(); d > 0 {
		kopts = append(kopts, kafka.WithClientOptions(kgo.SessionTimeout(d), kgo.HeartbeatInterval(max(d/10, 50*time.Millisecond))))
	}
	kopts = append(kopts, o.kafkaOpts...)
	if w.src, err = kafka.NewSource(kopts...); err != nil {
		return nil, fmt.Errorf("central worker: %w", err)
	}
	if w.m, err = newMetrics(o.reg, w.src.Stats); err != nil {
		return nil, fmt.Errorf("central worker: metrics: %w", err)
	}
	w.host = newHost(cfg, w.src, w.shards, nil, w.log, w.m)
	ok = true
	return w, nil
}

// decodeEdgeSignal reads the edge gateway's signal envelope: key = sensor,
// ts, value = the smoothed reading.
func decodeEdgeSignal(rec *kgo.Record, d *kafka.Decoded) error {
	sig, _, err := kafka.DecodeSignal[edge.Mode, edge.Payload](rec.Value)
	if err != nil {
		return err
	}
	if sig.Key == "" {
		return errors.New("signal envelope without a key")
	}
	d.Key, d.TS = []byte(sig.Key), sig.TS
	if len(d.Inputs) > 0 {
		d.Inputs[0] = streaming.Float(sig.Payload.Smoothed)
	}
	return nil
}

// onApply turns the graph's outputs of one record into sink writes. It
// runs on the partition goroutine.
func (w *Worker) onApply(a *kafka.Applied) {
	w.m.recordsIn.Add(1)
	if a.Instance == nil {
		return
	}
	ts := a.TS * w.scale
	w.m.seenTS(ts)
	var buf [4]Output
	outs := buf[:0]
	for i, name := range graphOutputs {
		c := a.Instance.Output(i)
		if c.IsNone() {
			continue
		}
		o := Output{Sensor: a.Key, Signal: name, TS: ts, Value: c.Float64(), Partition: a.Partition.Partition, Offset: a.Offset, Epoch: a.Epoch}
		if name == SignalEpisode {
			o.Mode = c.Mode()
		}
		outs = append(outs, o)
	}
	if len(outs) == 0 || len(w.sinks.sinks) == 0 {
		return
	}
	w.m.recordsOut.Add(uint64(len(outs)))
	w.sinks.Write(context.Background(), outs)
}

// Host returns the worker's shard host.
func (w *Worker) Host() *Host { return w.host }

// Source returns the worker's Kafka source (for its Stats).
func (w *Worker) Source() *kafka.Source { return w.src }

// Shards returns the registry the checkpoint activities serve.
func (w *Worker) Shards() *activities.Shards { return w.shards }

// TaskQueue returns the worker's own Temporal task queue.
func (w *Worker) TaskQueue() string { return workflows.WorkerTaskQueue(w.cfg.WorkerID) }

// Graph returns the derived-signal graph every sensor runs.
func (w *Worker) Graph() *streaming.Graph { return w.graph }

// Err implements activities.LeaseKeeper: nil while the worker runs and
// (with a coordination store) its presence lease is renewed; the fatal
// error of the Kafka source once it failed, or the coordination worker's
// error once its leases expired (split.ErrLeasesExpired: no renewal
// landed for a lease TTL).
func (w *Worker) Err() error {
	if e := w.fatal.Load(); e != nil {
		return *e
	}
	if m := w.member.Load(); m != nil {
		if err := m.sw.Err(); err != nil {
			return fmt.Errorf("central worker %q: coordination: %w", w.cfg.WorkerID, err)
		}
	}
	return nil
}

// Run connects to Kafka and (when configured) Temporal and serves until
// ctx ends, Close is called or the Kafka source fails. It then shuts down
// gracefully: the source leaves the group after each owned partition's
// final checkpoint, the sinks are flushed and closed, the Temporal workers
// stop (the lease workflow ends as stopped), and the Badger database is
// closed. It returns nil after a requested stop. Run may be called once.
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

	tc := w.o.tc
	if tc == nil && w.cfg.Temporal.Address != "" {
		copts, err := w.cfg.Temporal.ClientOptions()
		if err != nil {
			return err
		}
		copts.Logger = tlog.NewStructuredLogger(w.log)
		dctx, dcancel := context.WithTimeout(ctx, 30*time.Second)
		tc, err = client.DialContext(dctx, copts)
		dcancel()
		if err != nil {
			return fmt.Errorf("central worker %q: dial temporal %s: %w", w.cfg.WorkerID, w.cfg.Temporal.Address, err)
		}
		defer tc.Close()
	}
	w.host.tc = tc // before any goroutine reads it

	m, jerr := w.join(ctx)
	if jerr != nil {
		if ctx.Err() != nil {
			return nil // stopped while registering: nothing was served
		}
		return jerr
	}
	w.member.Store(m)
	defer m.stop() // after the Temporal workers (deferred below) stopped

	var tws []worker.Worker
	var lease leaseSupervisor
	if tc != nil {
		// The stop timeout lets the lease activity report its completion.
		// Heartbeats reach the server every lease interval (a third of
		// the heartbeat timeout) instead of the SDK's default 80% of it,
		// so a Temporal outage of up to two intervals never makes the
		// lease workflow declare this worker dead.
		aw := worker.New(tc, w.TaskQueue(), worker.Options{
			WorkerStopTimeout:            10 * time.Second,
			MaxHeartbeatThrottleInterval: w.cfg.Checkpoint.HeartbeatTimeout.D() / 3,
		})
		aw.RegisterActivity(activities.NewCheckpoints(w.shards))
		aw.RegisterActivity(&activities.Handoffs{Host: w.host})
		aw.RegisterActivity(&leases{activities.Leases{Host: w.host, Keeper: w}})
		tws = append(tws, aw)
		if w.cfg.Temporal.ControlWorker {
			cw := worker.New(tc, workflows.ControlTaskQueue, worker.Options{})
			RegisterWorkflows(cw)
			tws = append(tws, cw)
		}
		for i, tw := range tws {
			if err := tw.Start(); err != nil {
				stopAll(tws[:i])
				return fmt.Errorf("central worker %q: start temporal worker: %w", w.cfg.WorkerID, err)
			}
		}
		defer func() {
			// Activity worker first: the lease activity completes. A
			// control worker in this process then lets the lease
			// workflow finish before it stops too.
			tws[0].Stop()
			if len(tws) > 1 {
				if leaseRun := lease.current(); leaseRun != nil {
					wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
					if err := leaseRun.Get(wctx, nil); err != nil {
						w.log.Warn("lease workflow did not finish", "err", err)
					}
					wcancel()
				}
				tws[1].Stop()
			}
		}()
		run, err := w.startLease(ctx, tc)
		if err != nil {
			return err
		}
		lease.set(run)
		sctx, scancel := context.WithCancel(ctx)
		lease.wg.Go(func() { w.superviseLease(sctx, tc, &lease) })
		defer func() { scancel(); lease.wg.Wait() }()
	}

	srcDone := make(chan error, 1)
	go func() { srcDone <- w.src.Run(ctx) }()
	hostCtx, hostCancel := context.WithCancel(context.Background())
	var bg sync.WaitGroup
	bg.Go(func() { w.host.run(hostCtx, w.o.watch) })
	if tc == nil && !w.cfg.Checkpoint.Disabled {
		bg.Go(func() { w.checkpointLoop(hostCtx) })
	}
	w.log.Info("central worker running", "pipeline", w.cfg.Pipeline, "group", w.cfg.Kafka.Group, "topic", w.cfg.Kafka.Topic,
		"task_queue", w.TaskQueue(), "temporal", tc != nil)

	var twin <-chan struct{} // the coordination worker stopped on its own: a twin took our id
	if m != nil {
		twin = m.sw.Stopped()
	}
	var err error
	select {
	case <-ctx.Done():
		err = <-srcDone
	case err = <-srcDone:
	case <-twin:
		err = fmt.Errorf("coordination: %w", m.sw.Err())
		w.log.Error("another process took this worker id in the coordination store; stopping", "err", err)
		cancel()
		if serr := <-srcDone; serr != nil {
			err = errors.Join(err, serr)
		}
	}
	if err != nil {
		w.fatal.Store(&err)
	}
	// The source has left the group: every partition's final checkpoint
	// ran. Unregister what it held, then close the sinks.
	hostCancel()
	bg.Wait()
	w.host.sync(context.Background())
	w.host.announcers.Wait()
	cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer ccancel()
	if cerr := w.sinks.Close(cctx); cerr != nil {
		w.log.Warn("closing sinks", "err", cerr)
	}
	w.log.Info("central worker stopped", "err", err)
	if err != nil {
		return fmt.Errorf("central worker %q: %w", w.cfg.WorkerID, err)
	}
	return nil
}

// RegisterWorkflows registers tflo's workflows on a control-queue worker.
func RegisterWorkflows(r worker.WorkflowRegistry) {
	r.RegisterWorkflow(workflows.CheckpointWorkflow)
	r.RegisterWorkflow(workflows.HandoffWorkflow)
	r.RegisterWorkflow(workflows.LeaseWorkflow)
	r.RegisterWorkflow(workflows.BackfillWorkflow)
}

func stopAll(ws []worker.Worker) {
	for i := len(ws) - 1; i >= 0; i-- {
		ws[i].Stop()
	}
}

// startLease starts the worker's lease workflow, replacing one left by an
// earlier process of the same worker id.
func (w *Worker) startLease(ctx context.Context, tc client.Client) (client.WorkflowRun, error) {
	id := workflows.LeaseWorkflowID(w.cfg.WorkerID)
	opts := client.StartWorkflowOptions{
		ID: id, TaskQueue: workflows.ControlTaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_TERMINATE_EXISTING,
	}
	in := workflows.LeaseInput{WorkerID: w.cfg.WorkerID, TaskQueue: w.TaskQueue(), HeartbeatTimeout: w.cfg.Checkpoint.HeartbeatTimeout.D()}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	run, err := tc.ExecuteWorkflow(sctx, opts, workflows.LeaseWorkflow, in)
	if err != nil {
		return nil, fmt.Errorf("central worker %q: start lease workflow %s: %w", w.cfg.WorkerID, id, err)
	}
	return run, nil
}

// leaseSupervisor holds the worker's current lease workflow run.
type leaseSupervisor struct {
	wg  sync.WaitGroup
	mu  sync.Mutex
	run client.WorkflowRun
}

func (l *leaseSupervisor) set(r client.WorkflowRun) {
	l.mu.Lock()
	l.run = r
	l.mu.Unlock()
}

func (l *leaseSupervisor) current() client.WorkflowRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.run
}

// superviseLease starts a new lease workflow whenever the current one
// ends while the worker runs. That happens when Temporal was unreachable
// from this worker for longer than the heartbeat timeout: the workflow
// declared the worker dead and started handoffs of its shards (which this
// worker answers as the shards' owner: nothing moves). Without a new lease
// workflow, a later real death would go unnoticed.
func (w *Worker) superviseLease(ctx context.Context, tc client.Client, l *leaseSupervisor) {
	for {
		var st workflows.LeaseState
		err := l.current().Get(ctx, &st)
		if ctx.Err() != nil {
			return
		}
		w.log.Warn("the lease workflow ended while this worker runs (Temporal was unreachable for longer than the heartbeat timeout?); starting a new one",
			"status", st.Status, "handoffs", st.Handoffs, "err", err)
		w.m.leaseRestarts.Inc()
		for backoff := time.Second; ; backoff = min(2*backoff, 30*time.Second) {
			run, err := w.startLease(ctx, tc)
			if err == nil {
				l.set(run)
				break
			}
			w.log.Warn("restarting the lease workflow failed; will retry", "err", err, "in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
	}
}

// checkpointLoop checkpoints every owned partition in process (no
// Temporal).
func (w *Worker) checkpointLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.Checkpoint.Interval.D())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := w.src.Checkpoint(ctx); err != nil && ctx.Err() == nil {
				w.log.Warn("checkpoint failed", "err", err)
			}
		}
	}
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
