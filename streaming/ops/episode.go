package ops

import (
	"encoding/binary"
	"fmt"

	"github.com/tflo-io/tflo/streaming"
)

// Episode turns a two-state mode into episodes with their duration: it
// emits Sig([EpisodeOpened], 0) on the record where the input's mode
// becomes 1 ([High] of a Hysteresis, [Up] of a ThresholdCross) and
// Sig([EpisodeClosed], duration) on the record where it leaves 1 again,
// duration being the event time between the two records. Records that
// change nothing emit nothing. The input's value is not used, only its
// mode (a plain float input has mode 0 and never opens an episode).
//
// There is no warm-up: the first record with mode 1 opens an episode.
//
// A record that leaves mode 1 with an event time before the episode's
// open (out of order) closes the episode with duration 0, never a
// negative one.
//
// It was the iot-portal's "alarm episode" operator and keeps its state
// name and format, so state saved by the central worker's copy loads
// here: Name is "alarm_episode" (the registered type name is "episode").
//
// State (TypeVersion 1), 17 bytes little-endian: open (0/1) | opened-at
// event time (int64) | episodes closed so far (uint64).
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

// NewEpisode returns an Episode with no episode open.
func NewEpisode() *Episode { return &Episode{} }

// Name returns "alarm_episode" (the state name of the iot-portal operator
// it replaces).
func (*Episode) Name() string { return "alarm_episode" }

// TypeVersion returns 1.
func (*Episode) TypeVersion() uint32 { return 1 }

// Arity is exactly one input.
func (*Episode) Arity() (int, int) { return 1, 1 }

// Reset forgets any open episode and the count.
func (e *Episode) Reset() { *e = Episode{} }

// Closed returns the number of episodes closed so far.
func (e *Episode) Closed() uint64 { return e.closed }

// Eval opens or closes an episode on a change of the input's mode.
func (e *Episode) Eval(in []streaming.Computed, ts int64) streaming.NodeOutput {
	if in[0].IsNone() {
		return streaming.NoOutput()
	}
	high := in[0].Mode() == EpisodeOpened
	switch {
	case high && !e.open:
		e.open, e.openedAt = true, ts
		return streaming.Sig(EpisodeOpened, 0)
	case !high && e.open:
		e.open = false
		e.closed++
		// The duration through uint64: exact where ts − openedAt
		// overflows int64 (event times more than 2^63 apart), as in
		// RateOfChange. A close stamped before the open (an
		// out-of-order record) still closes, as a ThresholdCross emits
		// its Down once and ignoring it would leave the episode open,
		// but with duration 0: a negative duration would subtract from
		// any sum of alarm time downstream.
		if ts < e.openedAt {
			return streaming.Sig(EpisodeClosed, 0)
		}
		return streaming.Sig(EpisodeClosed, float64(uint64(ts)-uint64(e.openedAt)))
	}
	return streaming.NoOutput()
}

// Save writes the 17-byte state.
func (e *Episode) Save() ([]byte, error) {
	b := make([]byte, 1, 17)
	if e.open {
		b[0] = 1
	}
	b = binary.LittleEndian.AppendUint64(b, uint64(e.openedAt))
	return binary.LittleEndian.AppendUint64(b, e.closed), nil
}

// Load reads a blob made by Save; it refuses a blob of another size or an
// open flag other than 0/1 and leaves the state unchanged.
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
