package devstack_test

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tflo-io/tflo/internal/devstack"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/testsuite/toolbin"
	"github.com/tflo-io/tflo/workflows"
)

// TestTemporalReadsHistoriesFromItsNamespaceCache: reading a history
// whose start carries search attributes does not read the namespace from
// the database each time. (start-dev's own default does, on one SQLite
// connection; under load such a read timed out and a test's wait on a
// workflow got "Namespace default is not found.".) Counted by the history
// service's persistence_requests metric, once its service_requests show
// the reads.
func TestTemporalReadsHistoriesFromItsNamespaceCache(t *testing.T) {
	toolbin.Require(t, "temporal", "TFLO_TEMPORAL")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tp, err := devstack.StartTemporal(ctx, devstack.TemporalOptions{Dir: t.TempDir(), Headless: true})
	require.NoError(t, err)
	defer tp.Close()
	run, err := tp.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "sa-history", TaskQueue: "nobody-polls",
		TypedSearchAttributes: temporal.NewSearchAttributes(workflows.SearchPipeline.ValueSet("p"))}, "NoSuchWorkflow")
	require.NoError(t, err)
	// count sums a counter of the server's over its series for operation
	// (and service, when not ""), as /metrics shows it now. The server
	// publishes its counters about once a second, not at each increment.
	count := func(name, operation, service string) int {
		t.Helper()
		resp, err := http.Get(tp.MetricsURL)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		n := 0
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, name+"{") && strings.Contains(line, `operation="`+operation+`"`) &&
				(service == "" || strings.Contains(line, `service_name="`+service+`"`)) {
				f := strings.Fields(line)
				v, err := strconv.Atoi(f[len(f)-1])
				require.NoError(t, err, line)
				n += v
			}
		}
		return n
	}
	const histories = 20
	served := func() int { return count("service_requests", "GetWorkflowExecutionHistory", "history") }
	// The history service's: the frontend and the system workers read
	// namespaces at start-up, and their counts come in late.
	reads := func() int { return count("persistence_requests", "GetNamespace", "history") }
	served0, reads0 := served(), reads()
	for range histories {
		require.NotEmpty(t, temporaltest.History(t, ctx, tp.Client, run.GetID(), run.GetRunID()))
	}
	// Wait until the counters show the history service served the reads
	// (a namespace read it made for one is counted before it).
	require.Eventually(t, func() bool { return served()-served0 >= histories }, 30*time.Second, 50*time.Millisecond,
		"the server's metrics never showed the %d history reads", histories)
	n := reads() - reads0
	t.Logf("%d namespace reads from the database for %d history reads", n, histories)
	require.Less(t, n, histories/2, "the server read the namespace from its database for the histories")
}
