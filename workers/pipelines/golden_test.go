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

	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/workers/pipelines"
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

func parse(t *testing.T, name string) pipeline.Pipeline {
	t.Helper()
	p, err := pipeline.Parse(pipelines.Spec(name), pipeline.WithEnv(func(string) (string, bool) { return "", false }))
	require.NoError(t, err)
	return p
}

func seq[T any](xs []T) func(func(T) bool) {
	return func(yield func(T) bool) {
		for _, x := range xs {
			if !yield(x) {
				return
			}
		}
	}
}

// portalOutputs runs a fleet's readings through iot-portal's specs in one
// uninterrupted pass — the edge pipeline, its Kafka sink's signal
// envelopes, the central pipeline over those envelopes — and renders every
// envelope and every derived output (what InfluxDB and the archive
// receive) as text lines.
func portalOutputs(t *testing.T, cfg simulator.Config) []byte {
	t.Helper()
	ctx := context.Background()
	var msgs []pipeline.Message
	sim, err := simulator.New(cfg)
	require.NoError(t, err)
	require.NoError(t, sim.Run(ctx, simulator.PublisherFunc(func(_ context.Context, topic string, p []byte) error {
		if _, err := mqtt.DecodeReading(p); err == nil { // the MQTT source dead-letters the others
			msgs = append(msgs, pipeline.Message{Topic: topic, Value: bytes.Clone(p)})
		}
		return nil
	})))

	edge, central := parse(t, "iot-portal-edge.yaml"), parse(t, "iot-portal-central.yaml")
	edgeOut := streaming.NewMemorySink()
	_, err = pipeline.Evaluate(ctx, edge, seq(msgs), edgeOut)
	require.NoError(t, err)
	env, err := edge.SinkEnv(nil)
	require.NoError(t, err)
	enc, err := edge.Sinks[0].(pipeline.KafkaSink).Encoder(env)
	require.NoError(t, err)
	signals, err := enc.AppendRecords(nil, edgeOut.Outputs())
	require.NoError(t, err)

	cenv, err := central.SinkEnv(nil)
	require.NoError(t, err)
	// The central graph over the signals in one pass; its outputs follow
	// the signal they came from (Evaluate's Offset is the message index).
	centralOut := streaming.NewMemorySink()
	cmsgs := make([]pipeline.Message, len(signals))
	for i, r := range signals {
		cmsgs[i] = pipeline.Message{Value: r.Value}
	}
	_, err = pipeline.Evaluate(ctx, central, seq(cmsgs), centralOut)
	require.NoError(t, err)
	byOffset := map[int64][]streaming.Output{}
	for _, o := range centralOut.Outputs() {
		byOffset[o.Offset] = append(byOffset[o.Offset], o)
	}
	var b bytes.Buffer
	for i, r := range signals {
		fmt.Fprintf(&b, "signal %s\n", r.Value)
		for _, o := range byOffset[int64(i)] {
			mode, _ := cenv.Modes(o.Name, o.Mode)
			fmt.Fprintf(&b, "output %s %s %d %q %s\n", o.Key, o.Name, o.TS, mode, strconv.FormatFloat(o.Value, 'g', -1, 64))
		}
	}
	return b.Bytes()
}

// TestIoTPortalOutputsAreUnchanged pins what iot-portal computes for two
// seeded fleets: the edge's signal envelopes on Kafka and the central
// workers' derived outputs (what InfluxDB and the archive receive). The
// golden files were recorded from the hand-wired edge and central graphs
// before the portal became pipeline specs (commit 4815215); the specs must
// reproduce them byte for byte. Run with -update only for an intended
// change of the portal's results.
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

// TestSpecsLoad: every example spec loads, strictly, against the default
// registry.
func TestSpecsLoad(t *testing.T) {
	ents, err := pipelines.FS.ReadDir(".")
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(ents), 4)
	for _, e := range ents {
		t.Run(e.Name(), func(t *testing.T) {
			p := parse(t, e.Name())
			require.NoError(t, p.Validate())
		})
	}
}
