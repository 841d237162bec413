package ops

import "github.com/tflo-io/tflo/streaming"

// Modes emitted by Hysteresis.
const (
	// Low: the value has not risen to the high threshold since it last
	// fell to the low one (the initial mode).
	Low streaming.Mode = 0
	// High: the value rose to the high threshold and has not yet fallen
	// to the low one.
	High streaming.Mode = 1
)

// Modes emitted by ThresholdCross (and by any catalog operator that
// reports a direction).
const (
	// Up: a confirmed crossing from at-or-below the threshold to above it.
	Up streaming.Mode = 1
	// Down: a confirmed crossing from above the threshold to at-or-below it.
	Down streaming.Mode = -1
)

// Modes emitted by Episode.
const (
	// EpisodeOpened: the input's mode turned to 1 (for example a
	// Hysteresis turned High); the value is 0.
	EpisodeOpened streaming.Mode = 1
	// EpisodeClosed: the input's mode left 1 again; the value is the
	// episode's duration in event-time units.
	EpisodeClosed streaming.Mode = 2
)
