package devstack

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.temporal.io/api/operatorservice/v1"

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
	// A Restart after Close started a server nothing stopped (Close runs
	// once).
	require.ErrorContains(t, tp.Restart(ctx), "Restart after Close")
	_, err = http.Get(tp.UIURL)
	require.Error(t, err, "no server came back")
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
	// The error names the server, the database and the statement.
	require.ErrorContains(t, err, s.URL)
	require.ErrorContains(t, err, `"SELECT nonsense FROM" in database "d"`)
	_, err = s.Count(ctx, "nodb", "m")
	require.ErrorContains(t, err, `in database "nodb"`)
	require.ErrorContains(t, err, "database not found")
}

func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }
