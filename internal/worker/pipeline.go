package worker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"

	"github.com/tflo-io/tflo/coordination/natskv"
	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/internal/temporalclient"
	"github.com/tflo-io/tflo/pipeline"
)

// PipelineMain is workers/cmd/worker: it runs the pipeline of a spec.
func PipelineMain() Main {
	cfg := &PipelineConfig{}
	var spec string
	var check bool
	return Main{
		Name:    "worker",
		Summary: "runs a tflo pipeline (source → keyed graph → sinks) from its YAML spec",
		Config:  cfg,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&spec, "pipeline", "", "the pipeline's spec (YAML); required")
			fs.BoolVar(&check, "check", false, "load and check the spec (and the config), print the pipeline and exit")
		},
		Keys: []KeysOf{{Heading: "Pipeline spec keys (--pipeline FILE; lists like graph.nodes and sinks are set in the file)", Zero: pipeline.Spec{}}},
		Run: func(ctx context.Context, log *slog.Logger, reg prometheus.Registerer) error {
			if spec == "" {
				return usageError{errors.New("--pipeline FILE is required")}
			}
			p, err := pipeline.Load(spec)
			if err != nil {
				return usageError{err}
			}
			if check {
				fmt.Fprintf(os.Stdout, "%s: pipeline %q, source %s, %d nodes, outputs %v, %d sinks: ok\n",
					spec, p.Name, sourceName(p.Source), len(p.Graph.Nodes), p.Graph.Outputs, len(p.Sinks))
				return nil
			}
			return RunPipeline(ctx, p, *cfg, log, reg)
		},
	}
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

// RunPipeline runs p as cfg deploys it: it makes a lazy Temporal client (when an
// address is set), opens the coordination store (when a NATS URL is
// set), serves backfills (when an InfluxDB is set) and runs the pipeline
// worker until ctx ends; opts are added to the worker's.
func RunPipeline(ctx context.Context, p pipeline.Pipeline, cfg PipelineConfig, log *slog.Logger, reg prometheus.Registerer, opts ...pipeline.Option) error {
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
		store, closeNATS, err := openNATS(ctx, cc, cfg.WorkerID)
		if err != nil {
			return err
		}
		defer closeNATS()
		o = append(o, pipeline.WithCoordination(store))
	}
	if cfg.Backfill.enabled() && tc != nil {
		env, err := p.SinkEnv(nil)
		if err != nil {
			return err
		}
		brokers := cfg.Backfill.KafkaBrokers
		if ks, ok := p.WithDefaults().Source.(*pipeline.KafkaSource); ok && len(brokers) == 0 {
			brokers = ks.Brokers
		}
		b := &BackfillWorker{
			URL: cfg.Backfill.InfluxURL, Token: os.Getenv(cfg.Backfill.TokenEnv), Brokers: brokers,
			S3: archiveloc.S3FromEnv(os.LookupEnv), Modes: env.Modes, Log: log.With("component", "backfill"),
		}
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
		return err
	}
	return w.Run(ctx)
}

// openNATS opens the job's JetStream KV buckets on the NATS server.
func openNATS(ctx context.Context, cc CoordinationConfig, workerID string) (*natskv.Store, func(), error) {
	where := fmt.Sprintf("coordination store %s (job %q)", cc.NATSURL, cc.Job)
	nc, err := nats.Connect(cc.NATSURL, nats.Name("tflo-worker-"+workerID), nats.MaxReconnects(-1),
		nats.ReconnectWait(time.Second), nats.Timeout(5*time.Second))
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
