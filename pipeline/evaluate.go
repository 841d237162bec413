package pipeline

import (
	"context"
	"iter"
	"log/slog"

	"github.com/tflo-io/tflo/streaming"
)

// EvalOption configures Evaluate.
type EvalOption func(*evalConfig)

type evalConfig struct {
	reg *streaming.Registry
}

// EvalRegistry resolves the graph's operator types in r (default: the
// registry the spec was loaded with, WithRegistry, else DefaultRegistry).
func EvalRegistry(r *streaming.Registry) EvalOption { return func(c *evalConfig) { c.reg = r } }

// EvalStats counts what Evaluate did.
type EvalStats struct {
	Records    int // messages decoded and run through the graph
	Rejected   int // messages the decoder refused (a running pipeline dead-letters them)
	Outputs    int // outputs written to the sink
	LastReason error
}

// Evaluate runs p over msgs in memory, on the calling goroutine: each
// message is decoded, run through its key's graph instance (kept in a map)
// and its outputs written to out, one Write per message. Nothing else of
// a running pipeline takes part: no source, no sinks of p, no state
// store, no checkpoints. It is how a pipeline is tested: the same value,
// decoder and graph as in production, over a fixed input (an MQTT
// source's decoding and topic rule included). Outputs carry
// Shard "evaluate", Epoch 0 and the message's index as Offset.
func Evaluate(ctx context.Context, p Pipeline, msgs iter.Seq[Message], out streaming.Sink, opts ...EvalOption) (EvalStats, error) {
	var cfg evalConfig
	for _, o := range opts {
		o(&cfg)
	}
	c, err := compile(p, cfg.reg)
	if err != nil {
		return EvalStats{}, err
	}
	dec := c.dec
	if src, ok := c.p.Source.(*MQTTSource); ok {
		// As the MQTT source decodes: not as the Kafka reading decoder.
		dec = src.evalDecoder(c)
	}
	keyed := streaming.NewKeyed[string](c.g)
	rec := Record{Inputs: make([]streaming.Computed, len(c.g.Inputs()))}
	var st EvalStats
	var outs []streaming.Output
	i := int64(-1)
	for m := range msgs {
		i++
		if err := ctx.Err(); err != nil {
			return st, err
		}
		clear(rec.Inputs)
		rec.Key, rec.TS = nil, 0
		if err := dec.Decode(m, &rec); err != nil {
			st.Rejected++
			st.LastReason = err
			continue
		}
		st.Records++
		key := string(rec.Key)
		inst := keyed.Eval(key, rec.TS, rec.Inputs...)
		outs = c.appendOutputs(outs[:0], inst, streaming.Output{Shard: "evaluate", Offset: i, Topic: m.Topic, Key: key, TS: rec.TS * c.scale})
		if len(outs) == 0 {
			continue
		}
		st.Outputs += len(outs)
		if err := out.Write(ctx, outs); err != nil {
			return st, err
		}
	}
	return st, nil
}

// SinkEnv returns the environment p's sinks are opened with (its mode
// names and time unit): what a test needs to build a sink's encoder,
// KafkaSink.Encoder, for Evaluate's outputs.
func (p Pipeline) SinkEnv(reg *streaming.Registry) (SinkEnv, error) {
	c, err := compile(p, reg)
	if err != nil {
		return SinkEnv{}, err
	}
	return c.sinkEnv(slog.New(slog.DiscardHandler)), nil
}
