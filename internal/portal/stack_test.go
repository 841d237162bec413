package portal

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/split"
	"github.com/tflo-io/tflo/internal/devstack"
)

// TestStartStackReportsAWorkerFailingAtStart: the edge gateway stops with
// an error before it subscribed (here a live twin holds its worker id in
// the coordination store, so it cannot register). StartStack must fail as
// soon as it does, with the edge's own error naming it. Bug: the start-up
// waited out its 30 s and reported only "edge gateway subscribed: not
// within 30s", dropping the worker's error.
func TestStartStackReportsAWorkerFailingAtStart(t *testing.T) {
	for _, b := range [][2]string{{"temporal", "TFLO_TEMPORAL"}, {"influxd", "TFLO_INFLUXD"}} {
		if _, err := devstack.Binary(b[0], b[1]); err != nil {
			if os.Getenv("TFLO_REQUIRE_SERVICES") == "1" {
				t.Fatal(err)
			}
			t.Skip(err)
		}
	}
	twinCtx, stopTwin := context.WithCancel(context.Background())
	var twinWG sync.WaitGroup
	t.Cleanup(func() { stopTwin(); twinWG.Wait() })
	beforeEdge = func(s *Stack) error {
		const key = "worker.edge-1" // split's presence key of the worker id
		twin, err := json.Marshal(split.Presence{Worker: "edge-1", Instance: "twin"})
		if err != nil {
			return err
		}
		out, err := s.Coordination.Create(twinCtx, coordination.Ephemeral, key, twin)
		if err != nil {
			return err
		}
		rev := out.Revision()
		twinWG.Go(func() { // a live twin: renews its presence, as split's renewals do
			tick := time.NewTicker(200 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-twinCtx.Done():
					return
				case <-tick.C:
				}
				if out, err := s.Coordination.Update(twinCtx, coordination.Ephemeral, key, twin, rev); err == nil && out.Won() {
					rev = out.Revision()
				}
			}
		})
		return nil
	}
	t.Cleanup(func() { beforeEdge = nil })

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	st, err := StartStack(ctx, StackOptions{Dir: t.TempDir(), Headless: true, LocalArchive: true, CentralWorkers: 1})
	if st != nil {
		_ = st.Close()
	}
	require.Error(t, err)
	require.NotContains(t, err.Error(), "not within", "the start-up waited out its deadline")
	require.Contains(t, err.Error(), `worker "edge-1"`)
	require.Contains(t, err.Error(), "twin")
	t.Logf("failed after %v: %v", time.Since(start), err)
}
