package influx_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/influx"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/logtest"
)

// refusals collects what the WithOnRefuse hook reports.
type refusals struct {
	mu   sync.Mutex
	errs []error
}

func (r *refusals) hook(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, err)
}

func (r *refusals) all() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]error(nil), r.errs...)
}

// TestSinkRefusesBadPointNotBatch is issues 17.6 and 17.1 (sink part):
// one point that cannot be written — a sensor id ending in a backslash,
// a NaN or an infinity — made InfluxDB refuse the whole 5,000-point batch
// (the backslash swallowed the separator after it) or failed Write, which
// at central made every later checkpoint fail. Now that point alone is
// refused, counted and reported; the rest of the batch is written and the
// sink stays healthy.
func TestSinkRefusesBadPointNotBatch(t *testing.T) {
	srv := sharedServer(t)
	srv.CreateDatabase(t, "tflo")
	value := func(v float64) []influx.Field { return []influx.Field{{Key: "value", Value: streaming.Float(v)}} }
	cases := []struct {
		name string
		bad  func(m string) influx.Point
		want string
	}{
		{"sensor id ending in a backslash", func(m string) influx.Point {
			return influx.Point{Measurement: m, Sensor: `dev\`, TS: baseTS + 1, Fields: value(1)}
		}, "backslash"},
		{"sensor id with a newline", func(m string) influx.Point {
			return influx.Point{Measurement: m, Sensor: "dev\n1", TS: baseTS + 1, Fields: value(1)}
		}, "non-printable"},
		{"NaN", func(m string) influx.Point {
			return influx.Point{Measurement: m, Sensor: "dev", TS: baseTS + 1, Fields: value(math.NaN())}
		}, "finite"},
		{"infinity", func(m string) influx.Point {
			return influx.Point{Measurement: m, Sensor: "dev", TS: baseTS + 1, Fields: value(math.Inf(-1))}
		}, "finite"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m := measurement("refuse")
			var got refusals
			s := newSink(t, srv.URL, "tflo/autogen", influx.WithOnRefuse(got.hook))
			ctx := context.Background()
			pts := genPoints(m, 0, 200)
			all := append(append(append([]influx.Point(nil), pts[:100]...), c.bad(m)), pts[100:]...)
			require.NoError(t, s.Write(ctx, all...), "one bad point must not fail the call")
			require.NoError(t, s.Flush(ctx))
			st := s.Stats()
			require.Equal(t, int64(0), st.Rejected, "the batch was not rejected")
			require.Equal(t, 200, srv.Count(t, "tflo", m))
			require.Equal(t, int64(200), st.Points)
			require.Equal(t, int64(1), st.Refused)
			errs := got.all()
			require.Len(t, errs, 1)
			require.ErrorIs(t, errs[0], influx.ErrPointRefused)
			require.ErrorContains(t, errs[0], c.want)
			var pe *influx.PointError
			require.ErrorAs(t, errs[0], &pe)
			require.Equal(t, m, pe.Measurement)

			// The sink carries on: later writes and flushes succeed.
			require.NoError(t, s.Write(ctx, genPoints(m, 200, 10)...))
			require.NoError(t, s.Flush(ctx))
			require.Equal(t, 210, srv.Count(t, "tflo", m))
		})
	}
}

// TestSinkTagRoundTrip writes sensor ids that need escaping through the
// sink into a real InfluxDB 1.8 and reads them back: each one comes back
// exactly, as its own series (the seed corpus of the line-protocol fuzz
// target in connectors/influx/lpcheck, end to end). Issue 17.6: a newline
// used to become a space, so "dev\n1" overwrote "dev 1".
func TestSinkTagRoundTrip(t *testing.T) {
	srv := sharedServer(t)
	srv.CreateDatabase(t, "tflo")
	m := measurement("tags")
	var got refusals
	s := newSink(t, srv.URL, "tflo/autogen", influx.WithOnRefuse(got.hook))
	ctx := context.Background()
	sensors := []string{"dev 1", "a,b", "a=b", `a\b`, `\a`, `"q"`, "日本語", "x y,z=w", "#a", "a#", "-", "a'b", `a\xb,c d=e`}
	var pts []influx.Point
	for i, sn := range sensors {
		pts = append(pts, influx.Point{Measurement: m, Sensor: sn, Mode: "m " + sn, TS: baseTS + int64(i), Fields: []influx.Field{{Key: "value", Value: streaming.Float(float64(i))}}})
	}
	// Written after "dev 1" at the same series and time on the old
	// encoder, this overwrote it.
	collide := influx.Point{Measurement: m, Sensor: "dev\n1", Mode: "m dev\n1", TS: baseTS, Fields: []influx.Field{{Key: "value", Value: streaming.Float(-1)}}}
	require.NoError(t, s.Write(ctx, append(pts, collide)...))
	require.NoError(t, s.Flush(ctx))
	require.Equal(t, int64(1), s.Stats().Refused)
	require.Len(t, got.all(), 1)
	require.True(t, errors.Is(got.all()[0], influx.ErrPointRefused))
	require.Equal(t, wantPoints(pts), readBack(t, srv.URL, "", "tflo/autogen", m))
}

// TestSinkRefusalLinesAreSampled: every refused point wrote a Warn line,
// so an operator emitting NaN for every record wrote a line a record;
// the lines are sampled (the first of every interval, the rest counted
// as "suppressed"), and Stats and the hook still count every one.
func TestSinkRefusalLinesAreSampled(t *testing.T) {
	srv := sharedServer(t)
	srv.CreateDatabase(t, "tflo")
	lines := logtest.NewCounter("influx point refused")
	var r refusals
	s := newSink(t, srv.URL, "tflo/autogen", influx.WithLogger(lines.Logger()), influx.WithOnRefuse(r.hook))
	m := measurement("sampled")
	const n = 200
	start := time.Now()
	pts := make([]influx.Point, n)
	for i := range pts {
		pts[i] = influx.Point{Measurement: m, Sensor: "dev", TS: int64(i + 1), Fields: []influx.Field{{Key: "value", Value: streaming.Float(math.NaN())}}}
	}
	require.NoError(t, s.Write(context.Background(), pts...))
	lines.RequireSampled(t, n, time.Since(start))
	require.Equal(t, int64(n), s.Stats().Refused)
	require.Len(t, r.all(), n)
}
