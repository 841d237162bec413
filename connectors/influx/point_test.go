package influx_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/tflo-io/tflo/connectors/influx"
	"github.com/tflo-io/tflo/streaming"
)

func TestAppendLine(t *testing.T) {
	f := func(k string, v streaming.Computed) influx.Field { return influx.Field{Key: k, Value: v} }
	cases := []struct {
		name string
		p    influx.Point
		want string
		err  string
	}{
		{"simple", influx.Point{Measurement: "temp", Sensor: "s1", Mode: "1", TS: 42, Fields: []influx.Field{f("value", streaming.Float(21.5))}},
			"temp,mode=1,sensor=s1 value=21.5 42", ""},
		{"no mode tag", influx.Point{Measurement: "temp", Sensor: "s1", TS: 1, Fields: []influx.Field{f("value", streaming.Float(-3))}},
			"temp,sensor=s1 value=-3 1", ""},
		{"fields sorted, kinds", influx.Point{Measurement: "m", Sensor: "s", TS: 7, Fields: []influx.Field{
			f("z", streaming.Int(-5)), f("a", streaming.Bool(true)), f("m", streaming.Sig(2, 1e21)), f("n", streaming.None())}},
			"m,sensor=s a=true,m=1e+21,z=-5i 7", ""},
		{"escapes", influx.Point{Measurement: "my temp,x", Sensor: "a b,c=d", Mode: "hi lo", TS: 0, Fields: []influx.Field{f("my field", streaming.Float(1))}},
			`my\ temp\,x,mode=hi\ lo,sensor=a\ b\,c\=d my\ field=1 0`, ""},
		{"literal backslash", influx.Point{Measurement: `m\x`, Sensor: `a\b`, TS: 1, Fields: []influx.Field{f(`k\y`, streaming.Float(1))}},
			`m\x,sensor=a\b k\y=1 1`, ""},
		// Issue 17.6: a trailing backslash escaped the separator after it
		// and InfluxDB refused the whole batch; a newline became a space,
		// so "a\nb" and "a b" were one series.
		{"trailing backslash", influx.Point{Measurement: "m", Sensor: `dev\`, Fields: []influx.Field{f("v", streaming.Float(1))}}, "", "backslash"},
		{"backslash before a separator", influx.Point{Measurement: "m", Sensor: `a\,b`, Fields: []influx.Field{f("v", streaming.Float(1))}}, "", "backslash"},
		{"newline", influx.Point{Measurement: "m", Sensor: "a\nb", Fields: []influx.Field{f("v", streaming.Float(1))}}, "", "non-printable"},
		{"tab in mode", influx.Point{Measurement: "m", Sensor: "s", Mode: "a\tb", Fields: []influx.Field{f("v", streaming.Float(1))}}, "", "non-printable"},
		{"invalid UTF-8", influx.Point{Measurement: "m", Sensor: "s\xff", Fields: []influx.Field{f("v", streaming.Float(1))}}, "", "UTF-8"},
		{"comment", influx.Point{Measurement: "#m", Sensor: "s", Fields: []influx.Field{f("v", streaming.Float(1))}}, "", "comment"},
		{"reserved field key", influx.Point{Measurement: "m", Sensor: "s", Fields: []influx.Field{f("time", streaming.Float(1))}}, "", "reserved"},
		{"timestamp out of range", influx.Point{Measurement: "m", Sensor: "s", TS: math.MinInt64, Fields: []influx.Field{f("v", streaming.Float(1))}}, "", "timestamp outside"},
		{"series key too long", influx.Point{Measurement: "m", Sensor: strings.Repeat("s", 70000), Fields: []influx.Field{f("v", streaming.Float(1))}}, "", "series key"},
		{"NaN", influx.Point{Measurement: "m", Sensor: "s", Fields: []influx.Field{f("v", streaming.Float(math.NaN()))}}, "", "finite floats"},
		{"Inf", influx.Point{Measurement: "m", Sensor: "s", Fields: []influx.Field{f("v", streaming.Float(math.Inf(1)))}}, "", "finite floats"},
		{"no measurement", influx.Point{Sensor: "s", Fields: []influx.Field{f("v", streaming.Float(1))}}, "", "empty measurement"},
		{"no sensor", influx.Point{Measurement: "m", Fields: []influx.Field{f("v", streaming.Float(1))}}, "", "empty sensor"},
		{"only None", influx.Point{Measurement: "m", Sensor: "s", Fields: []influx.Field{f("v", streaming.None())}}, "", "no field"},
		{"duplicate field", influx.Point{Measurement: "m", Sensor: "s", Fields: []influx.Field{f("v", streaming.Float(1)), f("v", streaming.Float(2))}}, "", "appears twice"},
		{"empty field key", influx.Point{Measurement: "m", Sensor: "s", Fields: []influx.Field{f("", streaming.Float(1))}}, "", "empty key"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			prefix := []byte("keep\n")
			got, err := influx.AppendLine(prefix, c.p)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want one mentioning %q", err, c.err)
				}
				if !errors.Is(err, influx.ErrPointRefused) {
					t.Fatalf("err = %v, want one wrapping ErrPointRefused", err)
				}
				if len(err.Error()) > 400 {
					t.Fatalf("error of %d bytes: a long sensor id is not shortened", len(err.Error()))
				}
				if string(got) != "keep\n" {
					t.Fatalf("dst changed on error: %q", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != "keep\n"+c.want {
				t.Fatalf("got  %q\nwant %q", got, "keep\n"+c.want)
			}
		})
	}
}

// The same signal must always encode to the same bytes: that is what
// makes a replay overwrite instead of duplicate.
func TestSignalPointDeterministic(t *testing.T) {
	x := 0.1 // a variable, so 0.1+0.2 is float64 arithmetic and not an exact constant
	s := streaming.Signal[streaming.Mode, float64]{Key: "sensor-7", TS: 1_700_000_000_123_456_789, Mode: 1, Payload: x + 0.2}
	names := func(m streaming.Mode) string { return [...]string{"low", "high"}[m] }
	a, err := influx.AppendLine(nil, influx.SignalPoint("alarm", s, names))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := influx.AppendLine(nil, influx.SignalPoint("alarm", s, names))
	if string(a) != string(b) {
		t.Fatalf("%q != %q", a, b)
	}
	if want := "alarm,mode=high,sensor=sensor-7 value=0.30000000000000004 1700000000123456789"; string(a) != want {
		t.Fatalf("got %q, want %q", a, want)
	}
}
