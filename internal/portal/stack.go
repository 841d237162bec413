package portal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tflo-io/tflo/coordination/memstore"
	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/internal/devstack"
	"github.com/tflo-io/tflo/internal/version"
	"github.com/tflo-io/tflo/internal/worker"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/files"
	"github.com/tflo-io/tflo/workers/pipelines"
	"github.com/tflo-io/tflo/workers/simulator"
)

// Names the stack uses (those of the specs).
const (
	// PipelineName names the central pipeline in workflow ids and the archive.
	PipelineName = "iot-portal"
	// SignalsTopic carries the edge's signals to the central workers.
	SignalsTopic = "signals"
	// SignalsDLQTopic receives signal records the central workers cannot decode.
	SignalsDLQTopic = "signals.dlq"
	// SensorsDLQTopic is the MQTT topic of malformed sensor payloads.
	SensorsDLQTopic = "dlq/sensors"
	// Database is the InfluxDB database of the derived signals.
	Database = "iot_portal"
	// ArchiveBucket is the in-process S3 server's bucket of the archive.
	ArchiveBucket = "tflo-archive"
)

// Spec files of the portal (workers/pipelines).
const (
	EdgeSpec    = "iot-portal-edge.yaml"
	CentralSpec = "iot-portal-central.yaml"
)

// StackOptions shape a Stack. Zero values take the documented defaults.
type StackOptions struct {
	// Dir is the work folder (required): Badger folders, the shared
	// checkpoint folder, the archive, the Temporal database, InfluxDB data
	// and the servers' logs go under it.
	Dir string
	// Simulator is the fleet (default: 20 sensors every 100ms in real
	// time, an anomaly every 100 readings, 1% malformed).
	Simulator simulator.Config
	// Partitions of the signals topic (default 4).
	Partitions int32
	// CentralWorkers is the number of central workers (default 2).
	CentralWorkers int
	// CheckpointInterval of every shard (default 5s).
	CheckpointInterval time.Duration
	// Headless starts Temporal without its web UI.
	Headless bool
	// Metrics serves each worker's /metrics on a free loopback port.
	Metrics bool
	// LocalArchive keeps the Parquet archive in the work folder
	// (Stack.ArchiveDir) instead of the in-process S3 server.
	LocalArchive bool
	// ArchiveMaxFileAge finishes the central workers' archive files this
	// long after they open (default: the spec's, 15 minutes); tests make
	// many small files with it.
	ArchiveMaxFileAge time.Duration
	// Tee sees every payload the simulator published (tests).
	Tee simulator.Publisher
	// BeforeSimulator, when set, runs after every worker is up and before
	// the simulator starts (tests subscribe to the dead-letter topic).
	BeforeSimulator func(*Stack) error
	// Log receives the workers' logs (default discard).
	Log *slog.Logger
}

func (o StackOptions) withDefaults() StackOptions {
	s := o.Simulator
	if s.Sensors == 0 {
		s.Sensors = 20
	}
	if s.AnomalyEvery == 0 {
		s.AnomalyEvery = 100
	}
	if s.Start.IsZero() && s.Rounds == 0 {
		s.Pace = true
	}
	o.Simulator = s
	if o.Partitions == 0 {
		o.Partitions = 4
	}
	if o.CentralWorkers == 0 {
		o.CentralWorkers = 2
	}
	if o.CheckpointInterval == 0 {
		o.CheckpointInterval = 5 * time.Second
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	return o
}

// Stack is the iot-portal on one machine: the embedded services and the
// workers, each worker in its own goroutine.
type Stack struct {
	Opts     StackOptions
	Kafka    *devstack.Kafka
	MQTT     *devstack.MQTT
	Temporal *devstack.Temporal
	Influx   *devstack.Influx

	Simulator *simulator.Process
	Edge      *pipeline.Worker
	Centrals  []*pipeline.Worker
	Backfill  *worker.BackfillWorker
	// Coordination is the in-process coordination store in which the
	// central workers keep their presence leases (a NATS server in a
	// real deployment: coordination.nats_url).
	Coordination *memstore.Store

	// S3 is the in-process S3 server holding the Parquet archive (nil
	// with Opts.LocalArchive).
	S3 *devstack.S3
	// Archive is the Parquet archive's location: s3://tflo-archive/<pipeline>
	// on S3, or file://<ArchiveDir> with Opts.LocalArchive. ArchiveS3
	// reaches it (backfills, archive tools).
	Archive   string
	ArchiveS3 archiveloc.S3
	// ArchiveDir is the local Parquet archive (Opts.LocalArchive);
	// CheckpointDir the shared durable checkpoint folder.
	ArchiveDir, CheckpointDir string
	// Metrics maps a worker name to its /metrics URL (with Opts.Metrics).
	Metrics map[string]string

	durable streaming.StateStore
	regs    map[string]*prometheus.Registry
	closers []func()

	simCancel, edgeCancel, centralCancel context.CancelFunc
	simDone                              chan struct{}
	simErr                               error
	edgeDone                             chan error
	centralDone                          []chan error
	closeOnce, stopOnce                  sync.Once
	stopErr                              error
	closeErr                             error

	// taken is, per partition of the signals topic, the offset after the
	// last signal a central worker took (centralTaken).
	takenMu sync.Mutex
	taken   map[streaming.ShardID]int64

	// failed is closed when the first worker stops without being asked
	// (failErr says which and why).
	failed   chan struct{}
	failOnce sync.Once
	failErr  error
}

// StartStack starts the services (Kafka and MQTT, then Temporal with its
// UI and InfluxDB in parallel, then the S3 server unless LocalArchive),
// the central workers (the first also runs the workflows; their first
// announcement starts the pipeline's checkpoint coordinator), the
// backfill worker, the edge gateway and the simulator. On error
// everything started is stopped.
func StartStack(ctx context.Context, o StackOptions) (_ *Stack, err error) {
	o = o.withDefaults()
	if o.Dir == "" {
		return nil, errors.New("portal stack: no work folder (StackOptions.Dir)")
	}
	s := &Stack{Opts: o, ArchiveDir: filepath.Join(o.Dir, "archive"), CheckpointDir: filepath.Join(o.Dir, "checkpoints"),
		Metrics: map[string]string{}, regs: map[string]*prometheus.Registry{}, failed: make(chan struct{})}
	defer func() {
		if err != nil {
			// What stopping reports (a worker's error, the others' failed
			// final checkpoints) is part of the failed start; an error
			// already returned (a failed worker's) is not repeated.
			if j, ok := s.stopAll().(interface{ Unwrap() []error }); ok {
				for _, e := range j.Unwrap() {
					if !errors.Is(err, e) {
						err = errors.Join(err, e)
					}
				}
			}
		}
	}()
	dirs := []string{s.CheckpointDir, filepath.Join(o.Dir, "temporal"), filepath.Join(o.Dir, "influxdb")}
	if o.LocalArchive {
		dirs = append(dirs, s.ArchiveDir)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, fmt.Errorf("portal stack: %w", err)
		}
	}
	log := o.Log

	// Services.
	if s.Kafka, err = devstack.StartKafka(devstack.KafkaTopic{Name: SignalsTopic, Partitions: o.Partitions}, devstack.KafkaTopic{Name: SignalsDLQTopic, Partitions: 1}); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() { s.Kafka.Close() })
	if s.MQTT, err = devstack.StartMQTT(nil); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() {
		// Bounded: a deadlocked mochi broker (see pipeline.MQTTSource's
		// OmitReceiveMaximum) never finishes Close; the process exits
		// anyway.
		done := make(chan struct{})
		go func() { s.MQTT.Close(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			log.Warn("mqtt broker did not close within 5s; leaving it")
		}
	})
	var wg sync.WaitGroup
	var terr, ierr error
	wg.Go(func() {
		s.Temporal, terr = devstack.StartTemporal(ctx, devstack.TemporalOptions{Dir: filepath.Join(o.Dir, "temporal"), Headless: o.Headless})
	})
	wg.Go(func() {
		s.Influx, ierr = devstack.StartInflux(ctx, devstack.InfluxOptions{Dir: filepath.Join(o.Dir, "influxdb")})
	})
	wg.Wait()
	if s.Temporal != nil {
		s.closers = append(s.closers, func() { s.Temporal.Close() })
	}
	if s.Influx != nil {
		s.closers = append(s.closers, func() { s.Influx.Close() })
	}
	if err := errors.Join(terr, ierr); err != nil {
		return nil, err
	}
	if err := s.Influx.CreateDatabase(ctx, Database); err != nil {
		return nil, err
	}
	s.Archive = "file://" + s.ArchiveDir
	if !o.LocalArchive {
		if s.S3, err = devstack.StartS3(ArchiveBucket); err != nil {
			return nil, err
		}
		s.closers = append(s.closers, func() { s.S3.Close() })
		s.Archive, s.ArchiveS3 = "s3://"+ArchiveBucket+"/"+PipelineName, s.S3.Settings()
	}

	// Central workers. One durable store shared by the central workers
	// of this process (a files store locks its folder; separate processes
	// share S3).
	durable, err := files.Open(s.CheckpointDir)
	if err != nil {
		return nil, fmt.Errorf("portal stack: checkpoint folder: %w", err)
	}
	s.durable = durable
	s.closers = append(s.closers, func() { durable.Close() })
	if s.Coordination, err = memstore.New(); err != nil {
		return nil, fmt.Errorf("portal stack: coordination store: %w", err)
	}
	ccx, ccancel := context.WithCancel(context.WithoutCancel(ctx))
	s.centralCancel = ccancel
	for i := range o.CentralWorkers {
		p, err := s.CentralPipeline(i)
		if err != nil {
			return nil, err
		}
		id := fmt.Sprintf("central-%d", i+1)
		// The worker tags its own lines with its pipeline and id.
		opts := []pipeline.Option{pipeline.WithWorkerID(id), pipeline.WithLogger(log), pipeline.WithMetrics(s.registry(id)),
			pipeline.WithTemporal(s.Temporal.Client), pipeline.WithCoordination(s.Coordination)}
		if i == 0 {
			opts = append(opts, pipeline.WithControlWorker())
		}
		w, err := pipeline.NewWorker(ctx, p, opts...)
		if err != nil {
			return nil, err
		}
		s.Centrals = append(s.Centrals, w)
		done := make(chan error, 1)
		s.centralDone = append(s.centralDone, done)
		go func() { done <- s.runWorker(ccx, id, w) }()
	}
	cp, err := s.CentralPipeline(0)
	if err != nil {
		return nil, err
	}
	env, err := cp.SinkEnv(nil)
	if err != nil {
		return nil, err
	}
	s.Backfill = &worker.BackfillWorker{URL: s.Influx.URL, Brokers: s.Kafka.Addrs(), S3: s.ArchiveS3, Modes: env.Modes, Log: log.With("worker", "backfill")}
	if err := s.Backfill.Start(s.Temporal.Client); err != nil {
		return nil, err
	}
	s.closers = append(s.closers, func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Backfill.Close(cctx)
	})
	// The central workers start the pipeline's checkpoint coordinator
	// with their first announcement (workflows.Announce).

	// Edge gateway.
	if beforeEdge != nil {
		if err := beforeEdge(s); err != nil {
			return nil, err
		}
	}
	ep, err := s.EdgePipeline()
	if err != nil {
		return nil, err
	}
	// With Temporal its shard (the MQTT client id) joins the rounds of
	// its pipeline's own checkpoint coordinator, iot-portal-edge; each run
	// claims the shard's epoch in the coordination store.
	if s.Edge, err = pipeline.NewWorker(ctx, ep, pipeline.WithWorkerID("edge-1"), pipeline.WithLogger(log), pipeline.WithMetrics(s.registry("edge")),
		pipeline.WithTemporal(s.Temporal.Client), pipeline.WithCoordination(s.Coordination)); err != nil {
		return nil, err
	}
	ecx, ecancel := context.WithCancel(context.WithoutCancel(ctx))
	s.edgeCancel, s.edgeDone = ecancel, make(chan error, 1)
	go func() { s.edgeDone <- s.runWorker(ecx, "edge-1", s.Edge) }()
	if err := waitFor(ctx, 30*time.Second, "edge gateway subscribed", func() bool { return s.Edge.Stats().Subscribed }, s); err != nil {
		return nil, err
	}

	if o.BeforeSimulator != nil {
		if err := o.BeforeSimulator(s); err != nil {
			return nil, err
		}
	}

	// Simulator.
	scfg := simulator.MainConfig{Config: o.Simulator}
	scfg.MQTT.URL = s.MQTT.URL()
	if s.Simulator, err = simulator.NewProcess(scfg, log.With("worker", "simulator"), s.registry("simulator")); err != nil {
		return nil, err
	}
	scx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	s.simCancel, s.simDone = scancel, make(chan struct{})
	go func() {
		defer close(s.simDone)
		s.simErr = s.Simulator.Run(scx, o.Tee)
	}()

	if o.Metrics {
		for name, reg := range s.regs {
			ms, err := worker.ServeMetrics("127.0.0.1:0", reg)
			if err != nil {
				return nil, err
			}
			s.closers = append(s.closers, func() { ms.Close() })
			s.Metrics[name] = ms.URL
		}
	}
	return s, nil
}

// beforeEdge, when set (tests), runs before the edge gateway starts.
var beforeEdge func(*Stack) error

func (s *Stack) registry(name string) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(version.Collector())
	s.regs[name] = reg
	return reg
}

// Bucket is the InfluxDB bucket of db (1.8: "db/autogen").
func Bucket(db string) string { return db + "/autogen" }

// lookup resolves the specs' ${...} references to the stack's services.
func (s *Stack) lookup(extra map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) {
		if v, ok := extra[name]; ok {
			return v, true
		}
		switch name {
		case "KAFKA_BROKERS":
			return strings.Join(s.Kafka.Addrs(), ","), true
		case "MQTT_URL":
			return s.MQTT.URL(), true
		case "INFLUX_URL":
			if s.Influx != nil {
				return s.Influx.URL, true
			}
		case "ARCHIVE_LOCATION":
			return s.Archive, true
		case archiveloc.EnvEndpoint:
			return s.ArchiveS3.Endpoint, true
		case archiveloc.EnvRegion:
			return s.ArchiveS3.Region, true
		case archiveloc.EnvAccessKeyEnv:
			return s.ArchiveS3.AccessKeyEnv, true
		case archiveloc.EnvSecretKeyEnv:
			return s.ArchiveS3.SecretKeyEnv, true
		case archiveloc.EnvResponseTimeout:
			return s.ArchiveS3.ResponseTimeout.String(), true
		}
		return "", false
	}
}

// CentralPipeline is the pipeline central worker i runs: the central
// spec with the stack's addresses, its own Badger folder, the shared
// checkpoint folder and the demo's shorter timeouts.
func (s *Stack) CentralPipeline(i int) (pipeline.Pipeline, error) {
	state := filepath.Join(s.Opts.Dir, fmt.Sprintf("central-%d", i+1), "badger")
	p, err := pipeline.Parse(pipelines.Spec(CentralSpec), pipeline.WithEnv(s.lookup(map[string]string{"STATE_DIR": state})))
	if err != nil {
		return pipeline.Pipeline{}, err
	}
	src := p.Source.(*pipeline.KafkaSource)
	src.SessionTimeout = 6 * time.Second
	p.State.Memory = 128 << 20
	p.State.Durable = pipeline.Durable{Store: s.durable}
	p.Checkpoint.Interval = s.Opts.CheckpointInterval
	p.Checkpoint.MaxCheckpointAge = 3 * s.Opts.CheckpointInterval // the spec's default was its own interval's
	p.Checkpoint.HeartbeatTimeout = 10 * time.Second
	p.Checkpoint.StageTimeout = 10 * time.Second
	p.Checkpoint.HandoffStepTimeout = 20 * time.Second
	for i, sink := range p.Sinks {
		if a, ok := sink.(pipeline.ArchiveSink); ok && s.Opts.ArchiveMaxFileAge > 0 {
			a.MaxFileAge = s.Opts.ArchiveMaxFileAge
			p.Sinks[i] = a
		}
	}
	return p, nil
}

// EdgePipeline is the pipeline the edge gateway runs: the edge spec with
// the stack's addresses.
func (s *Stack) EdgePipeline() (pipeline.Pipeline, error) {
	state := filepath.Join(s.Opts.Dir, "edge-1", "badger")
	p, err := pipeline.Parse(pipelines.Spec(EdgeSpec), pipeline.WithEnv(s.lookup(map[string]string{"STATE_DIR": state, "EDGE_ID": "edge-1"})))
	if err != nil {
		return pipeline.Pipeline{}, err
	}
	// The embedded broker is mochi-mqtt v2.7.9, whose flow control can
	// deadlock (see pipeline.MQTTSource.OmitReceiveMaximum).
	p.Source.(*pipeline.MQTTSource).OmitReceiveMaximum = true
	p.State.Memory = 96 << 20
	p.Checkpoint.Interval = s.Opts.CheckpointInterval
	p.Checkpoint.MaxCheckpointAge = 3 * s.Opts.CheckpointInterval // the spec's default was its own interval's
	return p, nil
}

// Shards are the checkpoint shards of the signals topic.
func (s *Stack) Shards() []streaming.ShardID {
	out := make([]streaming.ShardID, s.Opts.Partitions)
	for p := range s.Opts.Partitions {
		out[p] = streaming.KafkaShard(SignalsTopic, p)
	}
	return out
}

// runWorker runs w until ctx (only StopWorkers cancels it) ends. A
// worker that returns before that stopped without being asked: it is
// recorded (WorkerFailed), also when it returned no error.
func (s *Stack) runWorker(ctx context.Context, id string, w *pipeline.Worker) error {
	err := w.Run(ctx)
	if ctx.Err() == nil {
		if err == nil {
			err = fmt.Errorf("portal stack: worker %s stopped without being asked and without an error", id)
		}
		s.failOnce.Do(func() {
			s.failErr = err
			close(s.failed)
		})
	}
	return err
}

// WorkerFailed is closed when a worker stopped without being asked
// (WorkerErr says which and why); the others keep running until
// StopWorkers.
func (s *Stack) WorkerFailed() <-chan struct{} { return s.failed }

// WorkerErr is the error of the first worker that stopped without being
// asked (it names the worker), or nil.
func (s *Stack) WorkerErr() error {
	select {
	case <-s.failed:
		return s.failErr
	default:
		return nil
	}
}

// SimulatorDone is closed when the simulator has published its configured
// rounds (or failed: see SimulatorErr).
func (s *Stack) SimulatorDone() <-chan struct{} { return s.simDone }

// SimulatorErr is the simulator's result once SimulatorDone is closed.
func (s *Stack) SimulatorErr() error {
	<-s.simDone
	return s.simErr
}

// Close stops the simulator, then the edge gateway (final checkpoint),
// then the central workers (final checkpoints, sinks closed), then the
// backfill worker and the services. It returns the workers' errors
// (StopWorkers). Idempotent.
func (s *Stack) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.stopAll() })
	return s.closeErr
}

func (s *Stack) stopAll() error {
	err := s.StopWorkers()
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i]()
	}
	return err
}

// StopWorkers stops the simulator, waits (up to 15 s) until the edge
// gateway took every payload the simulator published, stops the edge
// gateway, waits (up to 15 s) until the central workers took every signal
// the edge published, then stops them (each draining and taking its final
// checkpoint). The services and the backfill worker keep running, so
// their results can be read. It returns the workers' errors. Idempotent.
func (s *Stack) StopWorkers() error {
	s.stopOnce.Do(func() { s.stopErr = s.stopWorkers() })
	return s.stopErr
}

func (s *Stack) stopWorkers() error {
	var errs []error
	if s.simCancel != nil {
		s.simCancel()
		if err := s.SimulatorErr(); err != nil {
			errs = append(errs, fmt.Errorf("simulator: %w", err))
		}
	}
	if s.edgeCancel != nil {
		if s.Simulator != nil {
			s.awaitEdge()
		}
		s.edgeCancel()
		if err := <-s.edgeDone; err != nil {
			errs = append(errs, err)
		}
	}
	if s.centralCancel != nil {
		// Drain: let the central workers apply what the edge published
		// (bounded, so a stuck worker cannot hold the shutdown).
		if s.Edge != nil {
			_ = waitFor(context.Background(), 15*time.Second, "central workers caught up", func() bool { return s.Stats().Lag <= 0 }, nil)
		}
		s.centralCancel()
		for _, d := range s.centralDone {
			if err := <-d; err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// edgeTakeTimeout bounds how long StopWorkers waits for the edge gateway
// to take what the simulator published.
const edgeTakeTimeout = 15 * time.Second

// awaitEdge waits (up to edgeTakeTimeout, or until the edge stopped on
// its own) until the edge gateway took every payload the stopped
// simulator published (applied or dead-lettered): the broker acknowledges
// a payload to the simulator before it delivers it to the edge, and an
// edge stopped at once would leave the last ones untaken (redelivered to
// its next run, but missing from this run's summary).
func (s *Stack) awaitEdge() {
	log := s.Opts.Log
	published := func() uint64 { sim := s.Simulator.Stats(); return uint64(sim.Readings + sim.Malformed) }
	taken := func() uint64 { e := s.Edge.Stats(); return e.RecordsIn + e.DeadLettered }
	pub := published()
	if taken() >= pub {
		return
	}
	log.Info("portal stack: stopping: waiting for the edge gateway to take every payload the simulator published",
		"published", pub, "taken", taken(), "timeout", edgeTakeTimeout)
	err := waitFor(context.Background(), edgeTakeTimeout, "edge gateway took every published payload", func() bool {
		select {
		case <-s.Edge.Done():
			return true // stopped on its own: it takes nothing more
		default:
		}
		return taken() >= pub
	}, nil)
	if n := taken(); err != nil || n < pub {
		log.Warn("portal stack: stopping the edge gateway before it took every payload the simulator published",
			"published", pub, "not_taken", pub-min(n, pub), "err", err)
	}
}

// waitFor polls cond every 20ms until it holds, ctx ends or d passes, or,
// with a stack, one of its workers stops without being asked: then it
// returns that worker's error (it names the worker) at once, rather than
// waiting out d to report only what did not happen.
func waitFor(ctx context.Context, d time.Duration, what string, cond func() bool, s *Stack) error {
	var failed <-chan struct{} // nil without a stack: never ready
	if s != nil {
		failed = s.failed
	}
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("portal stack: %s: not within %v", what, d)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-failed:
			return fmt.Errorf("portal stack: %s: a worker stopped: %w", what, s.failErr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}
