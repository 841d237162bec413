package devstack

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tflo-io/tflo/workflows"
)

// requireBinary skips (or fails under TFLO_REQUIRE_SERVICES=1) when a
// server binary is not built.
func requireBinary(t *testing.T, name, env string) {
	t.Helper()
	if _, err := Binary(name, env); err != nil {
		if os.Getenv("TFLO_REQUIRE_SERVICES") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

func TestKafkaProducesAndFetches(t *testing.T) {
	k, err := StartKafka(KafkaTopic{"a", 2}, KafkaTopic{"b", 1})
	require.NoError(t, err)
	defer k.Close()
	require.NotEmpty(t, k.Addrs())
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.Addrs()...), kgo.ConsumeTopics("a"))
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: "a", Value: []byte("x")}).FirstErr())
	fs := cl.PollFetches(ctx)
	require.NoError(t, fs.Err())
	require.Equal(t, "x", string(fs.Records()[0].Value))
	require.NoError(t, k.Close())
	require.NoError(t, k.Close(), "Close is idempotent")

	_, err = StartKafka(KafkaTopic{"bad", 0})
	require.ErrorContains(t, err, `"bad"`)
}

func TestMQTTStarts(t *testing.T) {
	b, err := StartMQTT(nil)
	require.NoError(t, err)
	require.Contains(t, b.Addr(), "127.0.0.1:")
	require.NoError(t, b.Close())
}

func TestBinaryMissing(t *testing.T) {
	t.Setenv("TFLO_NOPE", "/definitely/not/here")
	_, err := Binary("nope", "TFLO_NOPE")
	require.ErrorIs(t, err, ErrNoBinary)
	t.Setenv("TFLO_NOPE", "")
	_, err = Binary("tflo-no-such-binary", "TFLO_NOPE")
	require.ErrorIs(t, err, ErrNoBinary)
	require.ErrorContains(t, err, "make tools")
}

// TestTemporalWithUI: the dev server answers on its frontend, serves the
// web UI, and has tflo's search attributes registered; Close stops it.
func TestTemporalWithUI(t *testing.T) {
	requireBinary(t, "temporal", "TFLO_TEMPORAL")
	ctx := context.Background()
	tp, err := StartTemporal(ctx, TemporalOptions{Dir: t.TempDir()})
	require.NoError(t, err)
	defer tp.Close()
	resp, err := http.Get(tp.UIURL)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	sa, err := tp.Client.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "default"})
	require.NoError(t, err)
	for _, k := range []string{workflows.SearchPipeline.GetName(), workflows.SearchBreakerState.GetName()} {
		require.Contains(t, sa.CustomAttributes, k)
	}
	require.NoError(t, tp.Close())
	require.NoError(t, tp.Close())
	_, err = http.Get(tp.UIURL)
	require.Error(t, err, "the UI is gone after Close")
}

// TestTemporalReadsHistoriesFromItsNamespaceCache: reading a history
// whose start carries search attributes does not read the namespace from
// the database each time. (start-dev's own default does, on one SQLite
// connection; under load such a read timed out and a test's wait on a
// workflow got "Namespace default is not found.".) Counted by the
// server's persistence_requests metric.
func TestTemporalReadsHistoriesFromItsNamespaceCache(t *testing.T) {
	requireBinary(t, "temporal", "TFLO_TEMPORAL")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tp, err := StartTemporal(ctx, TemporalOptions{Dir: t.TempDir(), Headless: true})
	require.NoError(t, err)
	defer tp.Close()
	run, err := tp.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "sa-history", TaskQueue: "nobody-polls",
		TypedSearchAttributes: temporal.NewSearchAttributes(workflows.SearchPipeline.ValueSet("p"))}, "NoSuchWorkflow")
	require.NoError(t, err)
	reads := func() int {
		t.Helper()
		resp, err := http.Get(tp.MetricsURL)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		n := 0
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "persistence_requests{") && strings.Contains(line, `operation="GetNamespace"`) {
				f := strings.Fields(line)
				v, err := strconv.Atoi(f[len(f)-1])
				require.NoError(t, err, line)
				n += v
			}
		}
		return n
	}
	const histories = 20
	before := reads()
	for range histories {
		it := tp.Client.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enums.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		n := 0
		for it.HasNext() {
			_, err := it.Next()
			require.NoError(t, err)
			n++
		}
		require.Positive(t, n)
	}
	n := reads() - before
	t.Logf("%d namespace reads from the database for %d history reads", n, histories)
	require.Less(t, n, histories/2, "the server read the namespace from its database for the histories")
}

// TestInflux: /ping, CREATE DATABASE, a point written over /write is
// counted back; a crash (Stop) and Restart keep it.
func TestInflux(t *testing.T) {
	requireBinary(t, "influxd", "TFLO_INFLUXD")
	ctx := context.Background()
	s, err := StartInflux(ctx, InfluxOptions{Dir: t.TempDir()})
	require.NoError(t, err)
	defer s.Close()
	require.NoError(t, s.CreateDatabase(ctx, "d"))
	resp, err := http.Post(s.URL+"/write?db=d", "text/plain", stringsReader("m,sensor=a value=1 1\nm,sensor=a value=2 2\n"))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	n, err := s.Count(ctx, "d", "m")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	s.Stop()
	_, err = s.Count(ctx, "d", "m")
	require.Error(t, err)
	require.NoError(t, s.Restart(ctx))
	n, err = s.Count(ctx, "d", "m")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	_, err = s.Query(ctx, "d", "SELECT nonsense FROM")
	require.Error(t, err)
	require.False(t, errors.Is(err, context.Canceled))
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }
