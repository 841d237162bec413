package influx

import (
	"context"
	"slices"
	"sync"

	"github.com/tflo-io/tflo/streaming"
)

// OutputSink is the streaming.Sink writing a pipeline's outputs to
// InfluxDB. It is the one Output → point mapping: measurement = the
// output's name, tag sensor = the key, tag mode = the mode's name (for
// outputs whose operator names its modes), field value, timestamp = the
// record's event time. Live pipelines and backfills both write through
// it, so a backfill reproduces the live points exactly, and a replayed
// record overwrites its points.
//
// Safe for concurrent use (the Sink it wraps is).
type OutputSink struct {
	s     *Sink
	modes streaming.ModeNames
}

var _ streaming.Sink = (*OutputSink)(nil)

// NewOutputSink writes outputs through s, naming modes with modes (nil:
// no mode tags).
func NewOutputSink(s *Sink, modes streaming.ModeNames) *OutputSink {
	return &OutputSink{s: s, modes: modes}
}

// OutputPoint is the point of one output (the mapping OutputSink writes).
func OutputPoint(o streaming.Output, modes streaming.ModeNames) Point {
	return outputPoint(o, modes, make([]Field, 1))
}

// outputPoint is OutputPoint with its one field in field[0].
func outputPoint(o streaming.Output, modes streaming.ModeNames, field []Field) Point {
	field[0] = Field{Key: "value", Value: streaming.Float(o.Value)}
	p := Point{Measurement: o.Name, Sensor: o.Key, TS: o.TS, Fields: field[:1:1]}
	if modes != nil {
		if name, ok := modes(o.Name, o.Mode); ok {
			p.Mode = name
		}
	}
	return p
}

// outputScratch holds one Write's points and their fields: Sink.Write
// keeps neither, so they are reused (a point and a field slice an output
// were most of what the central worker allocated).
type outputScratch struct {
	pts    []Point
	fields []Field
}

var outputScratches = sync.Pool{New: func() any { return new(outputScratch) }}

// Write implements streaming.Sink.
func (k *OutputSink) Write(ctx context.Context, outs []streaming.Output) error {
	if len(outs) == 0 {
		return nil
	}
	sc := outputScratches.Get().(*outputScratch)
	defer outputScratches.Put(sc)
	sc.pts = slices.Grow(sc.pts[:0], len(outs))[:len(outs)]
	sc.fields = slices.Grow(sc.fields[:0], len(outs))[:len(outs)]
	for i, o := range outs {
		sc.pts[i] = outputPoint(o, k.modes, sc.fields[i:])
	}
	err := k.s.Write(ctx, sc.pts...)
	clear(sc.pts) // the pool does not keep the outputs' strings alive
	return err
}

// Flush implements streaming.Sink: every point written before the call is
// acknowledged (the sink seals its batch and waits for it, not for later
// batches).
func (k *OutputSink) Flush(ctx context.Context, _ streaming.ShardID, _ streaming.CheckpointID) error {
	return k.s.Flush(ctx)
}

// Dropped returns how many outputs the sink refused before sending (a
// non-finite value, a sensor id InfluxDB would refuse: Stats.Refused).
func (k *OutputSink) Dropped() uint64 { return uint64(k.s.Stats().Refused) }

// Close implements streaming.Sink.
func (k *OutputSink) Close(ctx context.Context) error { return k.s.Close(ctx) }

// Stats returns the underlying Sink's counters.
func (k *OutputSink) Stats() Stats { return k.s.Stats() }

// Ping reports whether the server answers (Sink.Ping).
func (k *OutputSink) Ping(ctx context.Context) error { return k.s.Ping(ctx) }

// Bucket is the bucket the sink writes to.
func (k *OutputSink) Bucket() string { return k.s.bucket }
