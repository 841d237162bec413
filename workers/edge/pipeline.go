package edge

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/ops"
)

// Sink is where the pipeline sends signals. Publish may block when the
// sink's buffer is full (back-pressure: the MQTT source slows down);
// Flush returns when everything published so far is durable.
type Sink interface {
	Publish(ctx context.Context, sig Signal) error
	Flush(ctx context.Context) error
}

// KafkaSink publishes signals with p in connectors/kafka's envelope, keyed
// by sensor id, stamped with epoch.
func KafkaSink(p *kafka.Publisher, epoch streaming.Epoch) Sink { return kafkaSink{p: p, epoch: epoch} }

type kafkaSink struct {
	p     *kafka.Publisher
	epoch streaming.Epoch
}

func (k kafkaSink) Publish(ctx context.Context, sig Signal) error {
	return kafka.PublishSignal(ctx, k.p, sig, nil, k.epoch)
}

func (k kafkaSink) Flush(ctx context.Context) error { return k.p.Flush(ctx) }

// NewGraph builds the per-sensor conditioning graph: input "value" →
// "smooth" (SMA of window) → "mode" (hysteresis low/high) → "alarm"
// (confirmed mode change after dwell), output "alarm".
func NewGraph(window int, low, high float64, dwell int64) (*streaming.Graph, error) {
	return streaming.NewBuilder().
		Input("value").
		Node("smooth", func() streaming.Operator { return ops.NewSMA(window) }, "value").
		Node("mode", func() streaming.Operator { return ops.NewHysteresis(low, high) }, "smooth").
		Node("alarm", func() streaming.Operator { return ops.NewThresholdCross(0.5, ops.OnMode(), ops.WithDwell(dwell)) }, "mode").
		Output("alarm").
		Build()
}

// Pipeline is the edge leg: see the package doc.
type Pipeline struct {
	cfg   config
	src   *mqtt.Source
	sink  Sink
	graph *streaming.Graph
	ckpt  *streaming.Checkpointer

	// Guarded by the source's cut lock (handler and Cut run under it).
	keyed *streaming.Keyed[string]
	dirty map[string]struct{}

	signals  atomic.Uint64
	readings atomic.Uint64
	running  atomic.Bool

	afterHandle         func() // test hook, nil in production
	skipFinalCheckpoint bool   // test hook: stop like a crash
}

// New returns a Pipeline reading from src, publishing to sink and
// checkpointing to store and cursors. src must not be running; the
// pipeline restores its cursor and runs it.
func New(src *mqtt.Source, sink Sink, store streaming.StateStore, cursors streaming.CursorStore, opts ...Option) (*Pipeline, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("edge pipeline: %w", err)
	}
	if src == nil || sink == nil || store == nil || cursors == nil {
		return nil, errors.New("edge pipeline: source, sink, state store and cursor store are all required")
	}
	g, err := NewGraph(cfg.smaWindow, cfg.low, cfg.high, cfg.dwell)
	if err != nil {
		return nil, fmt.Errorf("edge pipeline: %w", err)
	}
	p := &Pipeline{cfg: cfg, src: src, sink: sink, graph: g, keyed: streaming.NewKeyed[string](g), dirty: map[string]struct{}{}}
	copts := append([]streaming.CheckpointerOption{
		streaming.WithOperators(g.Operators()),
		streaming.WithCheckpointLogger(cfg.logger),
		streaming.WithOwnership(streaming.RouterOwnership[string](streaming.LocalShard[string]{Epoch: cfg.epoch}, cfg.shard)),
	}, cfg.checkpointOpts...)
	p.ckpt, err = streaming.NewCheckpointer(cfg.shard, checkpointSource{p}, store, cursors, copts...)
	if err != nil {
		return nil, fmt.Errorf("edge pipeline: %w", err)
	}
	return p, nil
}

// Stats counts readings applied and signals published.
type Stats struct {
	Readings, Signals uint64
	Checkpoint        streaming.CheckpointStatus
	Source            mqtt.Stats
}

// Stats returns the pipeline's counters.
func (p *Pipeline) Stats() Stats {
	return Stats{Readings: p.readings.Load(), Signals: p.signals.Load(), Checkpoint: p.ckpt.Status(), Source: p.src.Stats()}
}

// Graph returns the per-sensor graph template.
func (p *Pipeline) Graph() *streaming.Graph { return p.graph }

// Checkpoint runs one checkpoint now (snapshot → state save → cursor save).
func (p *Pipeline) Checkpoint(ctx context.Context) (streaming.CheckpointResult, error) {
	return p.ckpt.Checkpoint(ctx)
}

// Run restores the newest checkpoint (if any), then runs the source and
// the checkpoint timer until ctx is done or the source fails. On a clean
// stop it takes a final checkpoint (Drain) bounded by 10 seconds. Run may
// be called once.
func (p *Pipeline) Run(ctx context.Context) error {
	if !p.running.CompareAndSwap(false, true) {
		return errors.New("edge pipeline: Run called twice")
	}
	log := p.cfg.logger.With("shard", p.cfg.shard)
	info, err := p.ckpt.Restore(ctx)
	switch {
	case errors.Is(err, streaming.ErrNotFound):
		log.Info("edge: no checkpoint, starting fresh")
	case err != nil:
		return fmt.Errorf("edge pipeline %q: restore: %w", p.cfg.shard, err)
	default:
		log.Info("edge: restored", "checkpoint", info.ID, "pieces", info.Pieces, "bytes", info.Bytes)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	if p.cfg.checkpointInterval > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTicker(p.cfg.checkpointInterval)
			defer t.Stop()
			for {
				select {
				case <-runCtx.Done():
					return
				case <-t.C:
					if _, err := p.ckpt.Checkpoint(runCtx); err != nil && runCtx.Err() == nil {
						log.Warn("edge: checkpoint failed", "err", err)
					}
				}
			}
		}()
	}
	err = p.src.Run(runCtx, p.handle)
	cancel()
	wg.Wait()
	if err != nil {
		return fmt.Errorf("edge pipeline %q: %w", p.cfg.shard, err)
	}
	if p.skipFinalCheckpoint {
		return nil
	}
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer fcancel()
	if _, err := p.ckpt.Checkpoint(fctx); err != nil {
		return fmt.Errorf("edge pipeline %q: final checkpoint: %w", p.cfg.shard, err)
	}
	return nil
}

// handle applies one reading to its sensor's graph and publishes the
// signal it produces, if any. It runs under the source's cut lock.
func (p *Pipeline) handle(ctx context.Context, m mqtt.Message) error {
	r := m.Reading
	in := p.keyed.Eval(r.Sensor, r.TS, streaming.Float(r.Value))
	p.dirty[r.Sensor] = struct{}{}
	p.readings.Add(1)
	if p.afterHandle != nil {
		defer p.afterHandle()
	}
	out := in.Output(0)
	if out.IsNone() {
		return nil
	}
	mode := Cleared
	if out.Mode() == ops.Up {
		mode = Raised
	}
	smooth, _ := in.Value("smooth")
	sig := Signal{Key: r.Sensor, TS: r.TS, Mode: mode, Payload: Payload{Smoothed: smooth.Float64(), Raw: r.Value, Topic: m.Topic}}
	if err := p.sink.Publish(ctx, sig); err != nil {
		return fmt.Errorf("publish signal for sensor %q at ts %d: %w", r.Sensor, r.TS, err)
	}
	p.signals.Add(1)
	return nil
}
