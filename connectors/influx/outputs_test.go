package influx_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/influx"
	"github.com/tflo-io/tflo/streaming"
)

// lineServer is an HTTP server that accepts InfluxDB 1.x writes and keeps
// their lines.
type lineServer struct {
	*httptest.Server
	mu    sync.Mutex
	lines []string
}

func newLineServer(t *testing.T) *lineServer {
	ls := &lineServer{}
	ls.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ping" || r.URL.Path == "/health" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		ls.mu.Lock()
		ls.lines = append(ls.lines, strings.Split(strings.TrimSpace(string(body)), "\n")...)
		ls.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(ls.Close)
	return ls
}

func (ls *lineServer) got() []string {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return append([]string(nil), ls.lines...)
}

func outputs(n int, name string, base int64) []streaming.Output {
	outs := make([]streaming.Output, n)
	for i := range outs {
		outs[i] = streaming.Output{Name: name, Key: fmt.Sprintf("s-%d", i%7), TS: base + int64(i), Value: float64(i) / 4, Mode: streaming.Mode(i % 2)}
	}
	return outs
}

func modeNames(_ string, m streaming.Mode) (string, bool) {
	if m == 0 {
		return "", false
	}
	return "rising", true
}

// OutputSink.Write reuses its points between calls: what reaches the
// server is still, line for line, OutputPoint's point of every output.
func TestOutputSinkWritesOutputPointLines(t *testing.T) {
	ls := newLineServer(t)
	s, err := influx.NewSink(ls.URL, "db/autogen", influx.WithBatchSize(100))
	require.NoError(t, err)
	k := influx.NewOutputSink(s, modeNames)
	ctx := context.Background()
	var want []string
	for call, name := range []string{"mean", "max", "min"} {
		outs := outputs(150-40*call, name, int64(call)*1e9)
		require.NoError(t, k.Write(ctx, outs))
		for _, o := range outs {
			line, err := influx.AppendLine(nil, influx.OutputPoint(o, modeNames))
			require.NoError(t, err)
			want = append(want, string(line))
		}
	}
	require.NoError(t, k.Flush(ctx, "", 0))
	require.Equal(t, want, ls.got())
	require.NoError(t, k.Close(ctx))
}

// A Write of many outputs allocates a few times at most (the batch it
// fills grows now and then), not once or twice an output (it did: a
// point and a field slice each).
func TestOutputSinkWriteAllocations(t *testing.T) {
	ls := newLineServer(t)
	s, err := influx.NewSink(ls.URL, "db/autogen", influx.WithBatchSize(1<<20), influx.WithFlushInterval(time.Hour))
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	k := influx.NewOutputSink(s, modeNames)
	ctx := context.Background()
	outs := outputs(256, "mean", 0)
	require.NoError(t, k.Write(ctx, outs))
	allocs := testing.AllocsPerRun(50, func() {
		if err := k.Write(ctx, outs); err != nil {
			t.Fatal(err)
		}
	})
	require.Less(t, allocs, float64(len(outs))/16, "allocations a Write of %d outputs", len(outs))
}
