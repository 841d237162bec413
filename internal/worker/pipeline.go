package worker

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/coordination/natskv"
	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/internal/envconfig"
	"github.com/tflo-io/tflo/internal/temporalclient"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
)

// PipelineMain is workers/cmd/worker: it runs the pipeline of a spec.
// Each of edits, in order, changes the pipeline loaded from the spec
// before it is checked and run (workers/worker.EditPipeline); an error
// is a usage error naming the spec.
func PipelineMain(edits ...func(*pipeline.Pipeline) error) Main {
	cfg := &PipelineConfig{}
	var spec string
	var check, operators bool
	return Main{
		Name:    "worker",
		Summary: "runs a tflo pipeline (source → keyed graph → sinks) from its YAML spec",
		Config:  cfg,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&spec, "pipeline", "", "the pipeline's spec (YAML); required")
			fs.BoolVar(&check, "check", false, "load and check the spec (and the config), print the pipeline and exit")
			fs.BoolVar(&operators, "operators", false, "list the operator types this binary's specs may name (tflo's catalogs and any it registers), with their parameters, then its decoders and sinks, and exit; no other flag but --config goes with it")
		},
		CheckFlags: func(fs *flag.FlagSet) error {
			if !operators {
				return nil
			}
			// --print-config, --version and --probe ran instead of it,
			// --pipeline and --check were ignored: refused, not dropped.
			var with []string
			fs.Visit(func(f *flag.Flag) {
				if f.Name != "operators" && f.Name != "config" {
					with = append(with, "--"+f.Name)
				}
			})
			if len(with) > 0 {
				return fmt.Errorf("--operators lists the operator types and exits: it does not go with %s", strings.Join(with, ", "))
			}
			return nil
		},
		Keys:    []KeysOf{{Heading: "Pipeline spec keys (--pipeline FILE; lists like graph.nodes and sinks are set in the file)", Zero: pipeline.Spec{}, Defaults: specDefaults}},
		OneShot: func() bool { return check || operators },
		NamedVariables: func() []string {
			if spec == "" {
				return nil
			}
			var s pipeline.Spec
			_, _ = envconfig.LoadOrigins(spec, envconfig.Prefix, &s) // its problems are reported when it loads
			return envconfig.Named(s)
		},
		CheckSpec: func() error {
			if spec == "" {
				return nil
			}
			p, err := loadSpec(spec)
			if err != nil {
				return err // the edits run on a spec that loads
			}
			return applyEdits(spec, &p, edits)
		},
		PrintConfig: func(w io.Writer) error {
			if spec == "" {
				// The worker's configuration alone (the deployment's
				// environment, before a spec is chosen): printed, not
				// printed and then refused.
				fmt.Fprintf(w, "\n# pipeline spec: none (add --pipeline FILE to print it too)\n")
				return nil
			}
			p, err := loadSpec(spec)
			if err != nil {
				return err
			}
			var s pipeline.Spec
			origins, err := envconfig.LoadOrigins(spec, envconfig.Prefix, &s)
			if err != nil {
				return envconfig.FromFlag(err, "--pipeline")
			}
			es := effectiveSpec(s, p)
			if k := es.Source.Kafka; k != nil && cfg.WorkerID == "" && k.StaticMembership != nil && *k.StaticMembership {
				// Without worker_id the worker is named by its host name
				// and joins as a dynamic member (KafkaSource.StaticMembership):
				// true printed what the run does not do.
				kc, off := *k, false
				kc.StaticMembership = &off
				es.Source.Kafka = &kc
				const why = "off, worker_id is empty (a worker named by its host name joins as a dynamic member)"
				if o := origins.Of("source.kafka.static_membership"); o == "default" {
					origins["source.kafka.static_membership"] = "default: " + why
				} else {
					origins["source.kafka.static_membership"] = o + ", but " + why
				}
			}
			if len(es.Graph.Outputs) == 0 && es.Graph.Built == nil {
				// The default outputs: the nodes no other node reads.
				env, err := p.SinkEnv(nil)
				if err != nil {
					return err
				}
				es.Graph.Outputs = env.Outputs
			}
			fmt.Fprintf(w, "\n# pipeline spec %s, defaults applied\n", spec)
			if err := envconfig.Print(w, es, origins); err != nil {
				return err
			}
			if len(edits) == 0 {
				return nil
			}
			// What the program's edits made of it, as --check and the run
			// see it: a Go value has no keys to print. Refused as the run
			// and --check refuse it, not printed as if it would run.
			if err := applyEdits(spec, &p, edits); err != nil {
				return err
			}
			fmt.Fprintf(w, "\n# after the program's edits (EditPipeline)\n")
			fmt.Fprintf(w, "decoder = %s\n", goValue(p.Decoder))
			if p.Graph.Built != nil {
				fmt.Fprintf(w, "graph = a graph built in Go, %s\n", count(len(p.Graph.Built.Operators()), "node"))
			}
			for i, sink := range p.Sinks {
				fmt.Fprintf(w, "sinks[%d] = %s\n", i, goValue(sink))
			}
			if p.DeadLetter != nil {
				fmt.Fprintf(w, "dead_letter = %s\n", goValue(p.DeadLetter))
			}
			return nil
		},
		Run: func(ctx context.Context, rt Runtime) error {
			if operators {
				streaming.PrintOperatorTypes(os.Stdout, pipeline.DefaultRegistry().Types())
				fmt.Fprintln(os.Stdout)
				pipeline.PrintDecodersAndSinks(os.Stdout)
				return nil
			}
			if spec == "" {
				return usageError{errors.New("--pipeline FILE is required")}
			}
			p, err := loadSpec(spec)
			if err != nil {
				return usageError{err}
			}
			if err := applyEdits(spec, &p, edits); err != nil {
				return usageError{err}
			}
			for _, w := range cfg.ignored() {
				rt.Log.Warn(w)
			}
			if w := staticMembershipWithoutID(spec, *cfg); w != "" {
				rt.Log.Warn(w)
			}
			if check {
				env, err := p.SinkEnv(nil) // the graph as it would run
				if err != nil {
					return usageError{err}
				}
				nodes := len(p.Graph.Nodes)
				if p.Graph.Built != nil { // set by an edit
					nodes = len(p.Graph.Built.Operators())
				}
				fmt.Fprintf(os.Stdout, "%s: pipeline %q, source %s, %s, outputs %v, %s, dead letters to %s: ok\n",
					spec, p.Name, sourceName(p.Source), count(nodes, "node"), env.Outputs, count(len(p.Sinks), "sink"), deadLetterName(p.WithDefaults()))
				return nil
			}
			if rt.OwnsProcess {
				applyMemoryLimit(int64(p.State.Memory), rt.Log)
			}
			return runPipeline(ctx, p, *cfg, rt.Log, rt.Registry, rt.Ready)
		},
	}
}

// loadSpec is pipeline.Load of the spec --pipeline names: a file it
// cannot read is named by the flag ('--pipeline "x.yaml": no such file
// or directory').
func loadSpec(spec string) (pipeline.Pipeline, error) {
	p, err := pipeline.Load(spec)
	return p, envconfig.FromFlag(err, "--pipeline")
}

// staticMembershipWithoutID is the warning for a spec that sets
// source.kafka.static_membership to true (in the file or a variable, not
// by default) while worker_id is empty: the worker, named by its host
// name, joins as a dynamic member (KafkaSource.StaticMembership), which
// is not what the key asked for. Empty when there is nothing to say.
// Warned, not refused: the docs make it the rule, not an error.
func staticMembershipWithoutID(spec string, cfg PipelineConfig) string {
	var s pipeline.Spec
	origins, err := envconfig.LoadOrigins(spec, envconfig.Prefix, &s)
	const key = "source.kafka.static_membership"
	if err != nil || cfg.WorkerID != "" || s.Source.Kafka == nil || s.Source.Kafka.StaticMembership == nil ||
		!*s.Source.Kafka.StaticMembership || origins.Of(key) == "default" {
		return ""
	}
	return fmt.Sprintf("%s is true (%s) but worker_id is empty: the worker, named by its host name, joins the Kafka group as a dynamic member; set worker_id (%s) for static membership",
		key, origins.Of(key), envconfig.Name(envconfig.Prefix, "worker_id"))
}

// applyEdits runs the program's edits on p, loaded from spec, in order,
// then checks the pipeline they left; an edit's error, and the edited
// pipeline's problems, name the spec.
func applyEdits(spec string, p *pipeline.Pipeline, edits []func(*pipeline.Pipeline) error) error {
	if len(edits) == 0 {
		return nil
	}
	for _, edit := range edits {
		if err := edit(p); err != nil {
			return fmt.Errorf("%s: %w", spec, err)
		}
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%s as edited: %w", spec, err)
	}
	return nil
}

// goValue names a Go value of a pipeline: its String when it has one
// (pipeline.Use's sinks), else its type.
func goValue(v any) string {
	if s, ok := v.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", v)
}

// effectiveSpec is s with what p (s loaded, defaults applied) resolved:
// the source, time unit, limits, graph, state and checkpoint sections as
// the worker runs them.
func effectiveSpec(s pipeline.Spec, p pipeline.Pipeline) pipeline.Spec {
	switch src := p.Source.(type) {
	case *pipeline.KafkaSource:
		s.Source = pipeline.SourceSpec{Kafka: src}
	case *pipeline.MQTTSource:
		s.Source = pipeline.SourceSpec{MQTT: src}
	}
	s.TimeUnit, s.Graph, s.State, s.Checkpoint = p.TimeUnit, p.Graph, p.State, p.Checkpoint
	// The limits a spec leaves out are streaming's defaults, which every
	// record is checked against: printed as "" and 0 they read as no
	// limit at all.
	s.Limits = p.Limits.WithDefaults()
	// A node's parameters the spec leaves out are its type's defaults,
	// with which the run builds it (the SMA's warmup): printed beside the
	// ones the spec set, which keep their text.
	s.Graph.Nodes = slices.Clone(s.Graph.Nodes)
	for i, n := range s.Graph.Nodes {
		_, params, err := pipeline.DefaultRegistry().Resolve(n.Type, n.Params)
		if err != nil {
			continue // refused when the spec loaded
		}
		full := maps.Clone(n.Params)
		for name, v := range params.Map() {
			if given, set := full[name]; !set || given == nil { // null: the default too
				if full == nil {
					full = map[string]any{}
				}
				full[name] = v
			}
		}
		s.Graph.Nodes[i].Params = full
	}
	// The spec's sinks became p's in order, with their defaults.
	s.Sinks = slices.Clone(s.Sinks)
	for i := range min(len(s.Sinks), len(p.Sinks)) {
		if a, ok := p.Sinks[i].(pipeline.ArchiveSink); ok && s.Sinks[i].Archive != nil {
			s.Sinks[i].Archive = &a
		}
		if k, ok := p.Sinks[i].(pipeline.KafkaSink); ok && s.Sinks[i].Kafka != nil {
			k.Brokers = k.BrokersFor(p.Source)
			s.Sinks[i].Kafka = &k
		}
		for name := range s.Sinks[i].Registered { // one: the sink its type's New made
			s.Sinks[i].Registered = map[string]any{name: p.Sinks[i]}
		}
	}
	if k, ok := p.DeadLetter.(pipeline.KafkaSink); ok && s.DeadLetter != nil && s.DeadLetter.Kafka != nil {
		d := *s.DeadLetter
		k.Brokers = k.BrokersFor(p.Source)
		dk := pipeline.DeadLetterKafkaOf(k)
		d.Kafka = &dk
		s.DeadLetter = &d
	}
	return s
}

// specDefaults are a spec's defaults, with a Kafka and with an MQTT
// source, and with a Kafka dead-letter sink (dead_letter.kafka's keys
// have defaults too: max_buffered).
func specDefaults() []any {
	var out []any
	for _, src := range []pipeline.SourceSpec{{Kafka: &pipeline.KafkaSource{}}, {MQTT: &pipeline.MQTTSource{}}} {
		s := pipeline.Spec{Source: src, DeadLetter: &pipeline.DeadLetterEntry{Kafka: &pipeline.DeadLetterKafka{}}}
		p, _ := s.Pipeline() // nothing but the source is set: no error that matters here
		out = append(out, effectiveSpec(s, p.WithDefaults()))
	}
	return out
}

func sourceName(s pipeline.Source) string {
	switch s := s.(type) {
	case *pipeline.KafkaSource:
		return "kafka topic " + s.Topic
	case *pipeline.MQTTSource:
		return fmt.Sprintf("mqtt %v", s.Topics)
	}
	return fmt.Sprintf("%T", s)
}

// deadLetterName says where p's dead letters go (p with its defaults).
func deadLetterName(p pipeline.Pipeline) string {
	switch d := p.DeadLetter.(type) {
	case nil:
	case pipeline.KafkaSink:
		return "kafka topic " + d.Topic
	default:
		return fmt.Sprintf("%T", d)
	}
	switch s := p.Source.(type) {
	case *pipeline.KafkaSource:
		return "kafka topic " + s.DeadLetterTopic
	case *pipeline.MQTTSource:
		return "mqtt topic " + s.DeadLetterTopic
	}
	return "?"
}

// RunPipeline runs p as cfg deploys it: it makes a lazy Temporal client (when an
// address is set), opens the coordination store (when a NATS URL is
// set), serves backfills (when an InfluxDB is set) and runs the pipeline
// worker until ctx ends; opts are added to the worker's.
func RunPipeline(ctx context.Context, p pipeline.Pipeline, cfg PipelineConfig, log *slog.Logger, reg prometheus.Registerer, opts ...pipeline.Option) error {
	return runPipeline(ctx, p, cfg, log, reg, nil, opts...)
}

// runPipeline is RunPipeline that also sets ready's check (when not nil):
// "starting" until the pipeline worker runs, then the worker's Ready,
// and "draining" from the moment ctx ends.
func runPipeline(ctx context.Context, p pipeline.Pipeline, cfg PipelineConfig, log *slog.Logger, reg prometheus.Registerer, ready *Readiness, opts ...pipeline.Option) error {
	if ready != nil {
		// Until the pipeline worker runs (the coordination store may keep
		// it waiting): starting, or, once told to stop, draining.
		ready.Set(func(context.Context) error {
			if ctx.Err() != nil {
				return errors.New("draining: the worker stops before it served")
			}
			return errors.New("starting")
		})
	}
	o := []pipeline.Option{pipeline.WithLogger(log), pipeline.WithMetrics(reg)}
	if cfg.WorkerID != "" {
		o = append(o, pipeline.WithWorkerID(cfg.WorkerID))
	}
	var tc client.Client
	if r, ok, err := cfg.temporal(); err != nil {
		return err
	} else if ok {
		copts, err := r.Options(log)
		if err != nil {
			return err
		}
		if reg != nil {
			if copts, err = temporalclient.WithMetrics(copts, reg); err != nil {
				return err
			}
		}
		// Lazy: the worker starts and runs its hot path (checkpointing
		// locally) while Temporal is unreachable, and joins the
		// coordinator's rounds when it comes back.
		tc, err = client.NewLazyClient(copts)
		if err != nil {
			return fmt.Errorf("temporal client for %s: %w", r, err)
		}
		defer tc.Close()
		log.Info("temporal client ready (connects on first use)", "target", r.String(), "address_from", r.Source("address"))
		o = append(o, pipeline.WithTemporal(tc))
		if cfg.ControlWorker {
			o = append(o, pipeline.WithControlWorker())
		}
	}
	if cc := cfg.Coordination; cc.NATSURL != "" {
		store, closeNATS, err := openNATS(ctx, cc, cfg.WorkerID, log)
		if err != nil {
			if ctx.Err() != nil {
				return nil // stopped while waiting for the store: nothing was served
			}
			return err
		}
		defer closeNATS()
		o = append(o, pipeline.WithCoordination(store))
	}
	if cfg.Backfill.enabled() && tc != nil {
		// Checked here, not by Validate: --check works without the secret.
		if v := cfg.Backfill.TokenEnv; v != "" && os.Getenv(v) == "" {
			return usageError{fmt.Errorf("worker config: backfill.token_env names %s, which is unset or empty", v)}
		}
		env, err := p.SinkEnv(nil)
		if err != nil {
			return err
		}
		brokers := cfg.Backfill.KafkaBrokers
		var sec kafka.Security
		if ks, ok := p.WithDefaults().Source.(*pipeline.KafkaSource); ok {
			sec = ks.Security
			if len(brokers) == 0 {
				brokers = ks.Brokers
			}
		}
		roots, prefixes := cfg.Backfill.allowlists(p)
		var influxTLS *tls.Config
		if t := cfg.Backfill.InfluxTLS; t != nil {
			if influxTLS, err = t.Build(); err != nil {
				return fmt.Errorf("backfill.influx_tls: %w", err)
			}
		}
		archiveS3, err := archiveloc.S3FromEnv(os.LookupEnv)
		if err != nil {
			return fmt.Errorf("backfill archives: %w", err)
		}
		b := &BackfillWorker{
			URL: cfg.Backfill.InfluxURL, Token: os.Getenv(cfg.Backfill.TokenEnv), Brokers: brokers,
			S3: archiveS3, SinkS3: archiveSinkS3(p), Modes: env.Modes, Log: log.With("component", "backfill"),
			ArchiveRoots: roots, DatabasePrefixes: prefixes, KafkaSecurity: sec, InfluxTLS: influxTLS,
		}
		log.Info("backfills allowed", "archive_roots", roots, "database_prefixes", prefixes)
		// Started in the background with backoff: the client is lazy, and
		// a worker starts while Temporal is unreachable.
		bctx, bcancel := context.WithCancel(ctx)
		started := make(chan struct{})
		go func() {
			defer close(started)
			for backoff := time.Second; ; backoff = min(2*backoff, 30*time.Second) {
				err := b.Start(tc)
				if err == nil {
					return
				}
				log.Warn("starting the backfill worker failed (Temporal unreachable?); will retry", "err", err, "in", backoff)
				select {
				case <-bctx.Done():
					return
				case <-time.After(backoff):
				}
			}
		}()
		defer func() {
			bcancel()
			<-started
			cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			b.Close(cctx)
		}()
	}
	w, err := pipeline.NewWorker(ctx, p, append(o, opts...)...)
	if err != nil {
		if ctx.Err() != nil {
			// Stopped while opening the sinks (a broker that does not
			// answer yet): nothing was served, and the cancelled connect
			// is no failure of a requested stop.
			return nil
		}
		return err
	}
	if ready != nil {
		ready.Set(func(c context.Context) error {
			// Once stopping, the worker is not ready whatever its shards
			// say: while it drains, w.Ready said "ready" between a
			// partition's revoke and the next, and "1 of 2 owned
			// partitions restored" or "client closed" otherwise.
			if ctx.Err() != nil {
				return errors.New("draining: the worker stops after its final checkpoints")
			}
			return w.Ready(c)
		})
	}
	return w.Run(ctx)
}

// storeUnreachable tells a NATS server that cannot be reached now from a
// failure waiting does not mend: no server answered (nats.ErrNoServers),
// or the server's host name did not resolve, as a service's name does not
// before its container or pod is up (docker compose, Kubernetes); nats.go
// returns that lookup's error as it is.
func storeUnreachable(err error) bool {
	var dnsErr *net.DNSError
	return errors.Is(err, nats.ErrNoServers) || errors.As(err, &dnsErr)
}

// openNATS opens the job's JetStream KV buckets on the NATS server, with
// the credentials file and TLS the config names. While no server is
// reachable it waits (retrying with backoff, logging each attempt until
// ctx ends): the worker serves nothing before its presence is registered
// (a second process with its id must be ruled out), but a worker started
// during a NATS outage must not exit for it. Any other failure (refused
// credentials, TLS, no JetStream) is returned at once. Its errors print
// the URL redacted.
func openNATS(ctx context.Context, cc CoordinationConfig, workerID string, log *slog.Logger) (*natskv.Store, func(), error) {
	where := fmt.Sprintf("coordination store %s (job %q)", envconfig.RedactURLs(cc.NATSURL), cc.Job)
	opts := []nats.Option{nats.Name("tflo-worker-" + workerID), nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second), nats.Timeout(5 * time.Second)}
	if cc.NATSCredsFile != "" {
		if _, err := os.Stat(cc.NATSCredsFile); err != nil {
			return nil, nil, fmt.Errorf("%s: coordination.nats_creds_file: %w", where, err)
		}
		opts = append(opts, nats.UserCredentials(cc.NATSCredsFile))
	}
	if cc.NATSTLS != nil {
		tc, err := cc.NATSTLS.Build()
		if err != nil {
			return nil, nil, fmt.Errorf("%s: coordination.nats_tls: %w", where, err)
		}
		opts = append(opts, nats.Secure(tc))
	}
	nc, err := nats.Connect(cc.NATSURL, opts...)
	for backoff := time.Second; storeUnreachable(err); backoff = min(2*backoff, 5*time.Second) {
		log.Warn("coordination store unreachable; the worker waits for it before it serves", "store", envconfig.RedactURLs(cc.NATSURL), "err", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("connect %s: %w", where, ctx.Err())
		case <-time.After(backoff):
		}
		nc, err = nats.Connect(cc.NATSURL, opts...)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("connect %s: %w", where, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("%s: %w", where, err)
	}
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	kv, err := natskv.Open(octx, js, cc.Job, natskv.WithLeaseTTL(cc.LeaseTTL))
	if err != nil {
		nc.Close()
		return nil, nil, fmt.Errorf("open %s: %w", where, err)
	}
	return kv, nc.Close, nil
}

// count is n noun, plural unless n is 1: "1 node", "3 nodes".
func count(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
