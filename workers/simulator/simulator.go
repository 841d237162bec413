package simulator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"
)

// Config describes the simulated fleet. Zero values take the documented
// defaults.
type Config struct {
	// Sensors is the number of sensors (default 10), named sensor-000...
	Sensors int `json:"sensors" yaml:"sensors"`
	// Interval between two readings of one sensor (default 100ms).
	Interval time.Duration `json:"interval" yaml:"interval"`
	// Rounds bounds the run: every sensor publishes this many readings
	// (0: until the context ends).
	Rounds int `json:"rounds" yaml:"rounds"`
	// Base is the mean value (default 20), Noise the standard deviation of
	// the Gaussian noise (default 0.5), Drift the change per round (0).
	Base  float64 `json:"base" yaml:"base"`
	Noise float64 `json:"noise" yaml:"noise"`
	Drift float64 `json:"drift" yaml:"drift"`
	// AnomalyEvery: on average one reading in this many starts an anomaly
	// of AnomalyLength readings at Base+AnomalyHeight (default 200, 20,
	// 15; 0 anomalies with AnomalyEvery < 0).
	AnomalyEvery  int     `json:"anomaly_every" yaml:"anomaly_every"`
	AnomalyLength int     `json:"anomaly_length" yaml:"anomaly_length"`
	AnomalyHeight float64 `json:"anomaly_height" yaml:"anomaly_height"`
	// Malformed is the share of payloads sent broken (default 0.01; none
	// with Malformed < 0, as 0 means the default).
	Malformed float64 `json:"malformed" yaml:"malformed"`
	// Topic is the prefix; a reading of sensor s goes to <Topic>/<s>
	// (default "sensors").
	Topic string `json:"topic" yaml:"topic"`
	// Seed of the random source (default 1).
	Seed uint64 `json:"seed" yaml:"seed"`
	// Start is the event time of the first round; zero follows the clock.
	Start time.Time `json:"start,omitzero" yaml:"start,omitempty"`
	// Pace publishes in real time (one round per Interval); false
	// publishes as fast as the publisher accepts.
	Pace bool `json:"pace" yaml:"pace"`
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	if c.Sensors == 0 {
		c.Sensors = 10
	}
	if c.Interval == 0 {
		c.Interval = 100 * time.Millisecond
	}
	if c.Base == 0 {
		c.Base = 20
	}
	if c.Noise == 0 {
		c.Noise = 0.5
	}
	if c.AnomalyEvery == 0 {
		c.AnomalyEvery = 200
	}
	if c.AnomalyLength == 0 {
		c.AnomalyLength = 20
	}
	if c.AnomalyHeight == 0 {
		c.AnomalyHeight = 15
	}
	if c.Malformed == 0 {
		c.Malformed = 0.01
	}
	if c.Topic == "" {
		c.Topic = "sensors"
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	return c
}

// Validate reports the first problem, as a sentence.
func (c Config) Validate() error {
	// NaN or an infinity (a float key parses "NaN" and "Inf") makes
	// readings JSON cannot carry: the run would fail at its first
	// reading with an error naming no key. A NaN malformed share would
	// send none, as no comparison holds.
	for _, f := range []struct {
		key string
		v   float64
	}{{"base", c.Base}, {"noise", c.Noise}, {"drift", c.Drift}, {"anomaly_height", c.AnomalyHeight}, {"malformed", c.Malformed}} {
		if math.IsNaN(f.v) || math.IsInf(f.v, 0) {
			return fmt.Errorf("simulator: %s %g must be a finite number", f.key, f.v)
		}
	}
	switch {
	case c.Sensors < 0:
		return fmt.Errorf("simulator: sensors %d must not be negative", c.Sensors)
	case c.Interval < 0:
		return fmt.Errorf("simulator: interval %s must not be negative", c.Interval)
	case c.Rounds < 0:
		return fmt.Errorf("simulator: rounds %d must not be negative", c.Rounds)
	case c.Malformed > 1:
		return fmt.Errorf("simulator: malformed share %g must be at most 1 (below 0: none)", c.Malformed)
	case c.Noise < 0:
		return fmt.Errorf("simulator: noise %g must not be negative", c.Noise)
	case strings.ContainsAny(c.Topic, "+#\x00"):
		// MQTT topic names hold no wildcard (nor U+0000): the broker drops
		// the connection at such a publish, and the simulator, taking
		// that for an outage, would reconnect and publish it again for ever.
		return fmt.Errorf("simulator: topic %q must be a topic name without wildcards (+, #)", c.Topic)
	case strings.HasPrefix(c.Topic, "$"):
		// Reserved for the broker's own topics: mochi drops the connection
		// at a publish to $SYS (the same endless retry), and no # or +
		// subscription (the edge's sensors/#) reads a $ topic.
		return fmt.Errorf("simulator: topic %q must not start with $ (reserved for the broker's topics, such as $SYS)", c.Topic)
	case c.AnomalyLength < 0:
		// Run would make every anomaly one reading long, whatever was asked.
		return fmt.Errorf("simulator: anomaly_length %d must not be negative (0: the default, 20)", c.AnomalyLength)
	}
	return nil
}

// Publisher sends one payload. MQTT publishers use QoS 2.
type Publisher interface {
	Publish(ctx context.Context, topic string, payload []byte) error
}

// PublisherFunc adapts a function to Publisher.
type PublisherFunc func(ctx context.Context, topic string, payload []byte) error

// Publish calls f.
func (f PublisherFunc) Publish(ctx context.Context, topic string, payload []byte) error {
	return f(ctx, topic, payload)
}

// Stats counts what a run published.
type Stats struct {
	Readings  int64 `json:"readings"`  // well-formed readings
	Malformed int64 `json:"malformed"` // broken payloads
	Anomalies int64 `json:"anomalies"` // anomaly episodes started
}

// Simulator generates and publishes readings.
type Simulator struct {
	cfg                            Config
	readings, malformed, anomalies atomic.Int64
}

// New returns a simulator for cfg (defaults applied).
func New(cfg Config) (*Simulator, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Simulator{cfg: cfg}, nil
}

// Stats returns the counts so far.
func (s *Simulator) Stats() Stats {
	return Stats{Readings: s.readings.Load(), Malformed: s.malformed.Load(), Anomalies: s.anomalies.Load()}
}

// SensorName is the name of sensor i.
func SensorName(i int) string { return fmt.Sprintf("sensor-%03d", i) }

type reading struct {
	Sensor string  `json:"sensor"`
	TS     int64   `json:"ts"`
	Value  float64 `json:"value"`
}

// malformedPayloads are the kinds of broken input the edge must divert.
var malformedPayloads = []string{
	`{"sensor":"%s","ts":%d,"value":"hot"}`,
	`{"sensor":"%s","ts":%d}`,
	`{"ts":%[2]d,"value":1}`,
	`not json from %s at %d`,
	`{"sensor":"%s","ts":%d,"value":1e999}`,
}

// Run publishes until Rounds are done (returns nil) or ctx ends (returns
// ctx's error). A publish error stops the run and is returned.
func (s *Simulator) Run(ctx context.Context, pub Publisher) error {
	c := s.cfg
	rng := rand.New(rand.NewPCG(c.Seed, c.Seed^0x9e3779b97f4a7c15))
	remaining := make([]int, c.Sensors) // anomaly readings left per sensor
	var ticker *time.Ticker
	if c.Pace {
		ticker = time.NewTicker(c.Interval)
		defer ticker.Stop()
	}
	for round := 0; c.Rounds == 0 || round < c.Rounds; round++ {
		ts := time.Now()
		if !c.Start.IsZero() {
			ts = c.Start.Add(time.Duration(round) * c.Interval)
		}
		for i := range c.Sensors {
			name := SensorName(i)
			v := c.Base + c.Drift*float64(round) + c.Noise*rng.NormFloat64() + float64(i%5)*0.1
			started := false // an anomaly episode starts with this payload
			if remaining[i] > 0 {
				v += c.AnomalyHeight
				remaining[i]--
			} else if c.AnomalyEvery > 0 && rng.IntN(c.AnomalyEvery) == 0 {
				remaining[i] = c.AnomalyLength - 1
				v += c.AnomalyHeight
				started = true
			}
			var payload []byte
			broken := c.Malformed > 0 && rng.Float64() < c.Malformed
			if broken {
				payload = fmt.Appendf(nil, malformedPayloads[rng.IntN(len(malformedPayloads))], name, ts.UnixMilli())
			} else {
				var err error
				if payload, err = json.Marshal(reading{Sensor: name, TS: ts.UnixMilli(), Value: math.Round(v*1000) / 1000}); err != nil {
					return err
				}
			}
			if err := pub.Publish(ctx, c.Topic+"/"+name, payload); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				return fmt.Errorf("simulator: publish %s: %w", name, err)
			}
			if broken { // counted once sent
				s.malformed.Add(1)
			} else {
				s.readings.Add(1)
			}
			if started { // as the payload: an episode never sent did not start
				s.anomalies.Add(1)
			}
		}
		if c.Rounds > 0 && round+1 == c.Rounds {
			break // done: nothing to wait an interval for
		}
		if ticker != nil {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-ticker.C:
			}
		} else if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}

// ErrStopped is returned by publishers used after Close.
var ErrStopped = errors.New("simulator publisher stopped")
