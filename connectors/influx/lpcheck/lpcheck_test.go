package lpcheck

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/influxdata/influxdb/models"

	"github.com/tflo-io/tflo/connectors/influx"
	"github.com/tflo-io/tflo/streaming"
)

// neighbour is a plain point written before and after the fuzzed one, so
// a fuzzed point that breaks line splitting (an escaped newline, a
// backslash swallowing a separator) shows up as a wrong neighbour.
var neighbour = influx.Point{Measurement: "n", Sensor: "plain", TS: 7, Fields: []influx.Field{{Key: "value", Value: streaming.Float(1)}}}

// FuzzAppendLine: every point AppendLine accepts is one line that
// InfluxDB 1.8's parser reads back exactly (measurement, tags, fields,
// timestamp) and that passes the server's key validation; every point it
// refuses is refused with a *PointError.
func FuzzAppendLine(f *testing.F) {
	seeds := []struct {
		m, sensor, mode, field string
		kind                   uint8
		bits                   uint64
		ts                     int64
	}{
		{"temp", "s1", "1", "value", 0, math.Float64bits(21.5), 42},
		{"my temp,x", `a b,c=d`, "hi lo", "my field", 0, math.Float64bits(1), 0},
		{"m", `dev\`, "", "value", 0, 0, 1},   // trailing backslash (issue 17.6)
		{"m", "a\nb", "", "value", 0, 0, 1},   // newline (issue 17.6: collided with "a b")
		{"m", `a\b`, "", "value", 0, 0, 1},    // a literal backslash
		{"m", `a\,b`, "", "value", 0, 0, 1},   // backslash before a special
		{"m", `a\\ b`, "", "value", 0, 0, 1},  // two backslashes
		{"m", `x"y`, "", `f"k`, 1, 12345, -1}, // quotes
		{`m\=x`, "s", "", "v", 2, 1, 5},       // backslash before '=' in a measurement
		{"#m", "s", "", "v", 0, 0, 5},         // a comment
		{"m", "日本語", "モード", "値", 0, math.Float64bits(-3e-300), math.MaxInt64 - 1},
		{"m", "s", "", "time", 0, 0, 5}, // reserved field key
		{"m", "s", "", "v", 0, math.Float64bits(math.NaN()), 5},
		{"m", "s", "", "v", 0, 0, math.MinInt64},
		{"m", "s\x00", "", "v", 0, 0, 5},
		{"m", "s\ufffd", "", "v", 0, 0, 5},
		{"m", "s\xff", "", "v", 0, 0, 5},
		{" m", " s", " ", " v", 0, 0, 5},
		{"m", "s", "", "v", 1, math.MaxUint64, 5},
	}
	for _, s := range seeds {
		f.Add(s.m, s.sensor, s.mode, s.field, s.kind, s.bits, s.ts)
	}
	f.Fuzz(func(t *testing.T, m, sensor, mode, field string, kind uint8, bits uint64, ts int64) {
		var v streaming.Computed
		switch kind % 3 {
		case 0:
			v = streaming.Float(math.Float64frombits(bits))
		case 1:
			v = streaming.Int(int64(bits))
		default:
			v = streaming.Bool(bits&1 == 1)
		}
		p := influx.Point{Measurement: m, Sensor: sensor, Mode: mode, TS: ts, Fields: []influx.Field{{Key: field, Value: v}}}
		line, err := influx.AppendLine(nil, p)
		if err != nil {
			var pe *influx.PointError
			if !errors.As(err, &pe) || !errors.Is(err, influx.ErrPointRefused) {
				t.Fatalf("refusal is not a *PointError wrapping ErrPointRefused: %v", err)
			}
			return
		}
		n, _ := influx.AppendLine(nil, neighbour)
		batch := string(n) + "\n" + string(line) + "\n" + string(n)
		pts, err := models.ParsePoints([]byte(batch))
		if err != nil {
			t.Fatalf("InfluxDB 1.8 refuses the batch around %q: %v", line, err)
		}
		if len(pts) != 3 {
			t.Fatalf("InfluxDB 1.8 reads %d points from %q, want 3", len(pts), batch)
		}
		checkPoint(t, pts[0], neighbour)
		checkPoint(t, pts[1], p)
		checkPoint(t, pts[2], neighbour)
	})
}

// checkPoint compares what the parser read with the point written, and
// applies the server's own key validation (tsdb drops a series that
// fails it).
func checkPoint(t *testing.T, got models.Point, want influx.Point) {
	t.Helper()
	if string(got.Name()) != want.Measurement {
		t.Fatalf("measurement %q reads back as %q", want.Measurement, got.Name())
	}
	wantTags := map[string]string{"sensor": want.Sensor}
	if want.Mode != "" {
		wantTags["mode"] = want.Mode
	}
	tags := got.Tags()
	if len(tags) != len(wantTags) {
		t.Fatalf("point %+v reads back with tags %v", want, tags)
	}
	for _, tg := range tags {
		if w, ok := wantTags[string(tg.Key)]; !ok || w != string(tg.Value) {
			t.Fatalf("tag %q=%q reads back, want %v", tg.Key, tg.Value, wantTags)
		}
	}
	if !models.ValidKeyTokens(string(got.Name()), tags) {
		t.Fatalf("InfluxDB would drop the series of %+v (invalid key tokens)", want)
	}
	if got.UnixNano() != want.TS {
		t.Fatalf("timestamp %d reads back as %d", want.TS, got.UnixNano())
	}
	fields, err := got.Fields()
	if err != nil {
		t.Fatalf("fields of %+v: %v", want, err)
	}
	if len(fields) != len(want.Fields) {
		t.Fatalf("fields %v read back, want %+v", fields, want.Fields)
	}
	for _, f := range want.Fields {
		gv, ok := fields[f.Key]
		if !ok {
			t.Fatalf("field key %q missing; read back %v", f.Key, fields)
		}
		if f.Key == "time" || strings.TrimSpace(f.Key) == "" && f.Key == "" {
			t.Fatalf("reserved field key %q accepted", f.Key)
		}
		switch f.Value.Kind() {
		case streaming.KindInt:
			if gv != f.Value.Int64() {
				t.Fatalf("field %q = %v, read back %v", f.Key, f.Value.Int64(), gv)
			}
		case streaming.KindBool:
			if gv != f.Value.Truth() {
				t.Fatalf("field %q = %v, read back %v", f.Key, f.Value.Truth(), gv)
			}
		default:
			if gv != f.Value.Float64() {
				t.Fatalf("field %q = %v, read back %v", f.Key, f.Value.Float64(), gv)
			}
		}
	}
}
