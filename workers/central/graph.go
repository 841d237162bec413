package central

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/ops"
)

// Names of the derived signals: graph node names, Influx measurements and
// the archive's signal column.
const (
	SignalMean    = "mean"
	SignalMin     = "min"
	SignalMax     = "max"
	SignalEpisode = "alarm_episode"
)

// Modes of the alarm_episode signal.
const (
	// EpisodeOpened: the rolling mean reached the high threshold; the
	// value is 0.
	EpisodeOpened streaming.Mode = 1
	// EpisodeClosed: the rolling mean fell back to the low threshold; the
	// value is the episode's duration in the records' time unit.
	EpisodeClosed streaming.Mode = 2
)

// ModeName names an alarm_episode mode for the Influx "mode" tag.
func ModeName(m streaming.Mode) string {
	switch m {
	case EpisodeOpened:
		return "opened"
	case EpisodeClosed:
		return "closed"
	}
	return fmt.Sprint(int32(m))
}

// graphOutputs are the graph outputs in the order Graph declares them.
var graphOutputs = []string{SignalMean, SignalMin, SignalMax, SignalEpisode}

// Graph builds the per-sensor graph of derived signals:
//
//	value ─┬─ mean (SMA of window) ── alarm (hysteresis low/high) ── alarm_episode (Episode)
//	       ├─ min  (rolling min of window)
//	       └─ max  (rolling max of window)
//
// Outputs, in order: mean, min, max, alarm_episode.
func Graph(g GraphConfig) (*streaming.Graph, error) {
	c := Config{Graph: g}
	c.applyDefaults()
	g = c.Graph
	// Refuse what the operators' constructors would panic on.
	if g.Window < 1 || g.Window > 1<<20 {
		return nil, fmt.Errorf("central graph: window %d is outside 1..%d", g.Window, 1<<20)
	}
	if !(g.AlarmLow < g.AlarmHigh) || math.IsInf(g.AlarmLow, 0) || math.IsInf(g.AlarmHigh, 0) {
		return nil, fmt.Errorf("central graph: alarm thresholds low %g, high %g: want finite low < high", g.AlarmLow, g.AlarmHigh)
	}
	return streaming.NewBuilder().
		Input("value").
		Node(SignalMean, func() streaming.Operator { return ops.NewSMA(g.Window) }, "value").
		Node(SignalMin, func() streaming.Operator { return ops.NewRollingMin(g.Window) }, "value").
		Node(SignalMax, func() streaming.Operator { return ops.NewRollingMax(g.Window) }, "value").
		Node("alarm", func() streaming.Operator { return ops.NewHysteresis(g.AlarmLow, g.AlarmHigh) }, SignalMean).
		Node(SignalEpisode, func() streaming.Operator { return &Episode{} }, "alarm").
		Output(graphOutputs...).
		Build()
}

// Episode turns a High/Low mode (ops.Hysteresis) into alarm episodes: it
// emits Sig(EpisodeOpened, 0) when the mode turns High and
// Sig(EpisodeClosed, duration) when it turns Low again, duration being the
// event time between the two records. Records that change nothing emit
// nothing; an input without a mode (None) is ignored.
//
// State (TypeVersion 1), 17 bytes little-endian: open (0/1) | opened-at ts
// (int64) | closed episodes (uint64).
type Episode struct {
	streaming.Base
	open     bool
	openedAt int64
	closed   uint64
}

var (
	_ streaming.Operator = (*Episode)(nil)
	_ streaming.Arity    = (*Episode)(nil)
)

// Name returns "alarm_episode".
func (*Episode) Name() string { return "alarm_episode" }

// TypeVersion returns 1.
func (*Episode) TypeVersion() uint32 { return 1 }

// Arity is exactly one input.
func (*Episode) Arity() (int, int) { return 1, 1 }

// Reset forgets any open episode and the count.
func (e *Episode) Reset() { *e = Episode{} }

// Closed returns the number of episodes closed so far.
func (e *Episode) Closed() uint64 { return e.closed }

// Eval implements streaming.Operator.
func (e *Episode) Eval(in []streaming.Computed, ts int64) streaming.NodeOutput {
	if in[0].IsNone() {
		return streaming.NoOutput()
	}
	high := in[0].Mode() == ops.High
	switch {
	case high && !e.open:
		e.open, e.openedAt = true, ts
		return streaming.Sig(EpisodeOpened, 0)
	case !high && e.open:
		e.open = false
		e.closed++
		return streaming.Sig(EpisodeClosed, float64(ts-e.openedAt))
	}
	return streaming.NoOutput()
}

// Save implements streaming.Operator.
func (e *Episode) Save() ([]byte, error) {
	b := make([]byte, 1, 17)
	if e.open {
		b[0] = 1
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(e.openedAt))
	return binary.LittleEndian.AppendUint64(b, e.closed), nil
}

// Load implements streaming.Operator; it refuses a blob of another size
// or an open flag other than 0/1 and leaves the state unchanged.
func (e *Episode) Load(b []byte) error {
	if len(b) != 17 || b[0] > 1 {
		return &streaming.OperatorLoadError{Operator: e.Name(),
			Reason: fmt.Sprintf("blob of %d bytes (open flag %v), want 17 bytes with flag 0 or 1", len(b), b[:min(len(b), 1)]),
			Err:    streaming.ErrCorrupt}
	}
	e.open = b[0] == 1
	e.openedAt = int64(binary.LittleEndian.Uint64(b[1:]))
	e.closed = binary.LittleEndian.Uint64(b[9:])
	return nil
}
