package edge

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/tflo-io/tflo/streaming"
)

// Option configures a Pipeline.
type Option func(*config)

type config struct {
	smaWindow          int
	low, high          float64
	dwell              int64
	shard              string
	epoch              streaming.Epoch
	checkpointInterval time.Duration
	checkpointOpts     []streaming.CheckpointerOption
	logger             *slog.Logger
}

func defaultConfig() config {
	return config{
		smaWindow:          5,
		low:                math.NaN(),
		high:               math.NaN(),
		shard:              "edge",
		checkpointInterval: 10 * time.Second,
		logger:             slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func (c *config) validate() error {
	var errs []error
	if c.smaWindow < 1 || c.smaWindow > 1<<24 {
		errs = append(errs, fmt.Errorf("SMA window %d is outside 1..2^24", c.smaWindow))
	}
	if math.IsNaN(c.low) || math.IsNaN(c.high) {
		errs = append(errs, errors.New("no thresholds: set WithThresholds"))
	} else if math.IsInf(c.low, 0) || math.IsInf(c.high, 0) || c.low >= c.high {
		errs = append(errs, fmt.Errorf("thresholds low %g, high %g: want finite low < high", c.low, c.high))
	}
	if c.dwell < 0 {
		errs = append(errs, fmt.Errorf("dwell %d must not be negative", c.dwell))
	}
	if c.shard == "" {
		errs = append(errs, errors.New("empty shard name"))
	}
	if c.checkpointInterval < 0 {
		errs = append(errs, fmt.Errorf("checkpoint interval %s must not be negative", c.checkpointInterval))
	}
	return errors.Join(errs...)
}

// WithSMA sets the smoothing window in readings. Default 5.
func WithSMA(n int) Option { return func(c *config) { c.smaWindow = n } }

// WithThresholds sets the hysteresis: the alarm rises when the smoothed
// value reaches high and falls when it drops to low. Required.
func WithThresholds(low, high float64) Option { return func(c *config) { c.low, c.high = low, high } }

// WithDwell sets how long (in event-time milliseconds) a new alarm mode
// must hold before it is reported. Default 0: report at once.
func WithDwell(ms int64) Option { return func(c *config) { c.dwell = ms } }

// WithShard names the checkpoint shard (the state-store key prefix and the
// cursor key). Default "edge"; give each gateway its own.
func WithShard(name string) Option { return func(c *config) { c.shard = name } }

// WithEpoch sets the owner epoch stamped on checkpoints and signals.
// Default 0.
func WithEpoch(e streaming.Epoch) Option { return func(c *config) { c.epoch = e } }

// WithCheckpointInterval sets how often Run checkpoints. Default 10s; 0
// disables the timer (call Checkpoint yourself).
func WithCheckpointInterval(d time.Duration) Option {
	return func(c *config) { c.checkpointInterval = d }
}

// WithCheckpointerOptions passes options to the streaming.Checkpointer
// (stage deadlines, breaker, ownership). Default none.
func WithCheckpointerOptions(o ...streaming.CheckpointerOption) Option {
	return func(c *config) { c.checkpointOpts = append(c.checkpointOpts, o...) }
}

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }
