package simulator_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/workers/simulator"
)

type collect struct {
	mu   sync.Mutex
	msgs map[string][][]byte
}

func (c *collect) Publish(_ context.Context, topic string, p []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.msgs[topic] = append(c.msgs[topic], append([]byte(nil), p...))
	return nil
}

func TestSimulatorIsDeterministicAndCountsWhatItSends(t *testing.T) {
	cfg := simulator.Config{Sensors: 4, Rounds: 500, Malformed: 0.05, Seed: 7, Start: time.Unix(1_700_000_000, 0)}
	runOnce := func() (*collect, simulator.Stats) {
		c := &collect{msgs: map[string][][]byte{}}
		s, err := simulator.New(cfg)
		require.NoError(t, err)
		require.NoError(t, s.Run(context.Background(), c))
		return c, s.Stats()
	}
	a, sa := runOnce()
	b, sb := runOnce()
	assert.Equal(t, a.msgs, b.msgs, "same config, same readings")
	assert.Equal(t, sa, sb)
	assert.Equal(t, int64(2000), sa.Readings+sa.Malformed)
	assert.Positive(t, sa.Malformed)
	assert.Positive(t, sa.Anomalies)

	// Every payload the simulator calls well-formed decodes with the MQTT
	// source's decoder, and every one it calls malformed is refused by it.
	var good, bad int64
	for topic, ps := range a.msgs {
		assert.True(t, strings.HasPrefix(topic, "sensors/sensor-"), topic)
		for _, p := range ps {
			r, err := mqtt.DecodeReading(p)
			if err != nil {
				bad++
				continue
			}
			good++
			assert.Equal(t, strings.TrimPrefix(topic, "sensors/"), r.Sensor)
		}
	}
	assert.Equal(t, sa.Readings, good)
	assert.Equal(t, sa.Malformed, bad)
}

func TestSimulatorAnomaliesCrossThresholds(t *testing.T) {
	c := &collect{msgs: map[string][][]byte{}}
	s, err := simulator.New(simulator.Config{Sensors: 1, Rounds: 2000, Seed: 3, Start: time.Unix(0, 0)})
	require.NoError(t, err)
	require.NoError(t, s.Run(context.Background(), c))
	high := 0
	for _, p := range c.msgs["sensors/sensor-000"] {
		var r struct{ Value float64 }
		if json.Unmarshal(p, &r) == nil && r.Value > 30 {
			high++
		}
	}
	assert.Positive(t, high, "anomalies must reach above the default edge alarm threshold")
}

func TestSimulatorValidate(t *testing.T) {
	_, err := simulator.New(simulator.Config{Malformed: 2})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "malformed share 2 must be at most 1 (below 0: none)")
}

// TestSimulatorRefusesANegativeAnomalyLength: a negative anomaly_length
// is refused, naming the key. Bug: it was accepted and every anomaly was
// one reading long.
func TestSimulatorRefusesANegativeAnomalyLength(t *testing.T) {
	_, err := simulator.New(simulator.Config{AnomalyLength: -5})
	require.ErrorContains(t, err, "simulator: anomaly_length -5 must not be negative")
}

// TestSimulatorMalformedBelowZeroSendsNone: a share below 0 sends no
// broken payload (0 is the default, 1%). Bug: 0 was the default and a
// negative share refused, so there was no way to turn them off.
func TestSimulatorMalformedBelowZeroSendsNone(t *testing.T) {
	c := &collect{msgs: map[string][][]byte{}}
	s, err := simulator.New(simulator.Config{Sensors: 10, Rounds: 500, Malformed: -1})
	require.NoError(t, err)
	require.NoError(t, s.Run(context.Background(), c))
	assert.Zero(t, s.Stats().Malformed)
	for _, ps := range c.msgs {
		for _, p := range ps {
			_, err := mqtt.DecodeReading(p)
			require.NoError(t, err, "payload %s", p)
		}
	}
	assert.Equal(t, int64(5000), s.Stats().Readings)
}

// TestSimulatorCountsOnlyWhatWasPublished: a payload whose publish fails
// (the run stopped mid-round: the MQTT publisher sends nothing on an ended
// context) is not counted. Bug: it was counted before the publish, so the
// demo's final count was one too high.
func TestSimulatorCountsOnlyWhatWasPublished(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sent := 0
	s, err := simulator.New(simulator.Config{Sensors: 20})
	require.NoError(t, err)
	err = s.Run(ctx, simulator.PublisherFunc(func(ctx context.Context, _ string, _ []byte) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		sent++
		if sent == 10 {
			cancel() // a stop in the middle of a round
		}
		return nil
	}))
	require.ErrorIs(t, err, context.Canceled)
	st := s.Stats()
	assert.Equal(t, int64(sent), st.Readings+st.Malformed)
}

func TestSimulatorStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	s, err := simulator.New(simulator.Config{Sensors: 2})
	require.NoError(t, err)
	err = s.Run(ctx, simulator.PublisherFunc(func(context.Context, string, []byte) error {
		n++
		if n == 10 {
			cancel()
		}
		return nil
	}))
	assert.ErrorIs(t, err, context.Canceled)
	assert.GreaterOrEqual(t, n, 10)
}

// TestPacedRunEndsWithItsLastRound: a paced run returns once its last
// round is published, not an interval later (rounds: 1 with an hour's
// interval waited an hour for nothing).
func TestPacedRunEndsWithItsLastRound(t *testing.T) {
	s, err := simulator.New(simulator.Config{Sensors: 2, Rounds: 1, Interval: time.Hour, Pace: true})
	require.NoError(t, err)
	c := &collect{msgs: map[string][][]byte{}}
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background(), c) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after its last round")
	}
	require.Equal(t, int64(2), s.Stats().Readings+s.Stats().Malformed)
}

// TestSimulatorRefusesANonFiniteNumber: NaN or an infinity in a float
// key is refused, naming the key. Bug: it was accepted (a float key
// parses "NaN" and "Inf"); the run then failed at its first reading with
// "json: unsupported value: NaN", naming no key (a NaN malformed share
// sent no broken payload at all).
func TestSimulatorRefusesANonFiniteNumber(t *testing.T) {
	for _, tc := range []struct {
		key string
		cfg simulator.Config
	}{
		{"base", simulator.Config{Base: math.Inf(1)}},
		{"noise", simulator.Config{Noise: math.NaN()}},
		{"drift", simulator.Config{Drift: math.Inf(-1)}},
		{"anomaly_height", simulator.Config{AnomalyHeight: math.NaN()}},
		{"malformed", simulator.Config{Malformed: math.NaN()}},
	} {
		t.Run(tc.key, func(t *testing.T) {
			_, err := simulator.New(tc.cfg)
			require.ErrorContains(t, err, "simulator: "+tc.key+" ")
			require.ErrorContains(t, err, "must be a finite number")
		})
	}
}

// TestSimulatorCountsOnlyAnomaliesPublished: an anomaly episode whose
// first payload was not published (the run stopped, the publish failed)
// is not counted, as its payload is not. Bug: it was counted when drawn,
// before the publish, so a run that published nothing reported an
// anomaly.
func TestSimulatorCountsOnlyAnomaliesPublished(t *testing.T) {
	s, err := simulator.New(simulator.Config{Sensors: 1, Rounds: 1, AnomalyEvery: 1})
	require.NoError(t, err)
	refused := errors.New("refused")
	err = s.Run(context.Background(), simulator.PublisherFunc(func(context.Context, string, []byte) error { return refused }))
	require.ErrorIs(t, err, refused)
	assert.Equal(t, simulator.Stats{}, s.Stats(), "nothing was published")

	s, err = simulator.New(simulator.Config{Sensors: 1, Rounds: 1, AnomalyEvery: 1})
	require.NoError(t, err)
	require.NoError(t, s.Run(context.Background(), simulator.PublisherFunc(func(context.Context, string, []byte) error { return nil })))
	assert.Equal(t, int64(1), s.Stats().Anomalies, "the episode the one payload started")
}
