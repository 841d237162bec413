package pipelines_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/ops"
	"github.com/tflo-io/tflo/workers/central"
	"github.com/tflo-io/tflo/workers/edge"
	"github.com/tflo-io/tflo/workers/simulator"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata from this build")

// fleets are the seeded sensor fleets whose iot-portal outputs are pinned:
// the end-to-end test's and a larger one with the simulator's defaults.
var fleets = []struct {
	name string
	cfg  simulator.Config
}{
	{"e2e", simulator.Config{Sensors: 8, Rounds: 250, Interval: 100 * time.Millisecond, Start: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
		AnomalyEvery: 40, AnomalyLength: 10, Malformed: 0.03, Seed: 42}},
	{"fleet", simulator.Config{Sensors: 20, Rounds: 600, Start: time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC), Seed: 7}},
}

// portalOutputs runs a fleet's readings through the iot-portal's edge
// graph (SMA 5, hysteresis 24/30, threshold cross on the mode) and the
// central graph of the demo stack (window 3, alarms 25/28) in one
// uninterrupted pass, and renders every Kafka signal envelope and every
// derived output as text lines.
func portalOutputs(t *testing.T, cfg simulator.Config) []byte {
	t.Helper()
	var valid []struct {
		topic string
		r     mqtt.Reading
	}
	sim, err := simulator.New(cfg)
	require.NoError(t, err)
	require.NoError(t, sim.Run(context.Background(), simulator.PublisherFunc(func(_ context.Context, topic string, p []byte) error {
		if r, err := mqtt.DecodeReading(p); err == nil {
			valid = append(valid, struct {
				topic string
				r     mqtt.Reading
			}{topic, r})
		}
		return nil
	})))

	eg, err := edge.NewGraph(5, 24, 30, 0)
	require.NoError(t, err)
	cg, err := central.Graph(central.GraphConfig{Window: 3, AlarmLow: 25, AlarmHigh: 28})
	require.NoError(t, err)
	ek, ck := streaming.NewKeyed[string](eg), streaming.NewKeyed[string](cg)
	f := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	var b bytes.Buffer
	for _, v := range valid {
		r := v.r
		in := ek.Eval(r.Sensor, r.TS, streaming.Float(r.Value))
		if in.Output(0).IsNone() {
			continue
		}
		mode := edge.Cleared
		if in.Output(0).Mode() == ops.Up {
			mode = edge.Raised
		}
		sm, _ := in.Value("smooth")
		sig := edge.Signal{Key: r.Sensor, TS: r.TS, Mode: mode, Payload: edge.Payload{Smoothed: sm.Float64(), Raw: r.Value, Topic: v.topic}}
		env, err := kafka.EncodeSignal(sig, nil, 0)
		require.NoError(t, err)
		fmt.Fprintf(&b, "signal %s\n", env)
		cin := ck.Eval(sig.Key, sig.TS, streaming.Float(sig.Payload.Smoothed))
		for i, name := range cg.Outputs() {
			c := cin.Output(i)
			if c.IsNone() {
				continue
			}
			mode := ""
			if name == central.SignalEpisode {
				mode = central.ModeName(c.Mode())
			}
			fmt.Fprintf(&b, "output %s %s %d %q %s\n", sig.Key, name, sig.TS*1e6, mode, f(c.Float64()))
		}
	}
	return b.Bytes()
}

// TestIoTPortalOutputsAreUnchanged pins what iot-portal computes for two
// seeded fleets: the edge's signal envelopes on Kafka and the central
// workers' derived outputs (what InfluxDB and the archive receive). The
// golden files were recorded from the hand-wired edge and central graphs
// before the portal became pipeline specs; run with -update only for an
// intended change of the portal's results.
func TestIoTPortalOutputsAreUnchanged(t *testing.T) {
	for _, fl := range fleets {
		t.Run(fl.name, func(t *testing.T) {
			got := portalOutputs(t, fl.cfg)
			path := filepath.Join("testdata", "iot-portal-"+fl.name+".golden")
			if *update {
				require.NoError(t, os.WriteFile(path, got, 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Greater(t, bytes.Count(want, []byte("\nsignal ")), 10, "the fleet should raise and clear alarms")
			require.Equal(t, string(want), string(got))
		})
	}
}
