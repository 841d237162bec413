package mqtt

import (
	"errors"
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

func TestDecodeReading(t *testing.T) {
	cases := []struct {
		name    string
		in      string
		want    Reading
		wantErr string
	}{
		{"unix ms", `{"sensor":"a","ts":1767225600000,"value":21.5}`, Reading{"a", 1767225600000, 21.5}, ""},
		{"rfc3339", `{"sensor":"a","ts":"2026-01-01T00:00:00Z","value":1}`, Reading{"a", 1767225600000, 1}, ""},
		{"rfc3339 fraction and offset", `{"sensor":"a","ts":"2026-01-01T01:00:00.250+01:00","value":1}`, Reading{"a", 1767225600250, 1}, ""},
		{"fractional ms truncates", `{"sensor":"a","ts":1.9,"value":-3e2}`, Reading{"a", 1, -300}, ""},
		{"unknown fields ignored", `{"unit":"C","sensor":"a","ts":5,"value":0,"x":[1,{"y":2}]}`, Reading{"a", 5, 0}, ""},
		{"escaped sensor", `{"sensor":"b\u00e4r\"1","ts":5,"value":0}`, Reading{"bär\"1", 5, 0}, ""},
		{"not json", `nope`, Reading{}, "invalid character"},
		{"missing sensor", `{"ts":1,"value":1}`, Reading{}, `"sensor" is missing`},
		// Bug: these two were worded by encoding/json ("json: cannot
		// unmarshal array into Go value of type mqtt.wireReading").
		{"sensor not a string", `{"sensor":7,"ts":1,"value":1}`, Reading{}, `malformed reading: field "sensor" is a number, want a string`},
		{"not an object", `[{"sensor":"a","ts":1,"value":1}]`, Reading{}, "malformed reading: want a JSON object with sensor, ts and value, got an array"},
		{"a string", `"a"`, Reading{}, "malformed reading: want a JSON object with sensor, ts and value, got a string"},
		{"missing ts", `{"sensor":"a","value":1}`, Reading{}, `"ts" is missing`},
		{"null ts", `{"sensor":"a","ts":null,"value":1}`, Reading{}, `"ts" is missing`},
		{"bad ts string", `{"sensor":"a","ts":"noon","value":1}`, Reading{}, `"ts" is "noon"`},
		{"ts bool", `{"sensor":"a","ts":true,"value":1}`, Reading{}, `"ts" is true`},
		{"missing value", `{"sensor":"a","ts":1}`, Reading{}, `"value" is missing`},
		{"value string", `{"sensor":"a","ts":1,"value":"1"}`, Reading{}, `"value" is "1"`},
		{"value null", `{"sensor":"a","ts":1,"value":null}`, Reading{}, `"value" is missing`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, fast := scanReading([]byte(c.in), time.Millisecond); fast != (c.wantErr == "" && !strings.Contains(c.name, "escaped")) {
				t.Errorf("read by the scanner: %v", fast)
			}
			got, err := DecodeReading([]byte(c.in))
			if c.wantErr != "" {
				require.ErrorIs(t, err, ErrMalformed)
				require.ErrorContains(t, err, c.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, got)
		})
	}
}

func TestDecodeReadingAllocatesTheSensorOnly(t *testing.T) {
	b := []byte(`{"sensor":"boiler-1","ts":1767225600000,"value":21.5,"unit":"C"}`)
	require.Equal(t, 1.0, testing.AllocsPerRun(100, func() {
		if _, err := DecodeReading(b); err != nil {
			t.Fatal(err)
		}
	}))
}

func TestEncodeReadingRoundTrips(t *testing.T) {
	for _, r := range []Reading{{"a", 0, 0}, {"x/y z", -5, math.MaxFloat64}, {"\x01\"\\", 1 << 60, -1e-300}} {
		got, err := DecodeReading(EncodeReading(nil, r))
		require.NoError(t, err)
		assert.Equal(t, r, got)
	}
}

func FuzzDecodeReading(f *testing.F) {
	f.Add([]byte(`{"sensor":"a","ts":1767225600000,"value":21.5}`))
	f.Add([]byte(`{"sensor":"a","ts":"2026-01-01T00:00:00Z","value":1}`))
	f.Add([]byte(`{"sensor":"","ts":1e400,"value":1}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"sensor":"a","ts":1.9,"value":-3e2,"x":[1,{"y":2}]}`))
	f.Add([]byte(`{"sensor":"a","Sensor":"b","ts":1,"value":1}`))
	f.Add([]byte(`{"sensor":"a","ts":1,"value":1,"value":"x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		if fast, ok := scanReading(b, time.Millisecond); ok { // the scanner agrees with encoding/json
			if slow, err := slowReading(b, time.Millisecond); err != nil || slow != fast {
				t.Fatalf("scanner read %+v, encoding/json %+v, %v from %q", fast, slow, err, b)
			}
		}
		r, err := DecodeReading(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("error does not wrap ErrMalformed: %v", err)
			}
			return
		}
		if r.Sensor == "" || math.IsNaN(r.Value) || math.IsInf(r.Value, 0) {
			t.Fatalf("accepted an invalid reading %+v from %q", r, b)
		}
		again, err := DecodeReading(EncodeReading(nil, r))
		if err != nil || again != r {
			t.Fatalf("round trip of %+v: got %+v, %v", r, again, err)
		}
	})
}

// FuzzCheckedReading: what the source hands its handler (DecodeReading,
// then its Limits and the topic rule) always keeps them, whatever the
// payload and topic.
func FuzzCheckedReading(f *testing.F) {
	f.Add("sensors/a", []byte(`{"sensor":"a","ts":1767225600000,"value":21.5}`))
	f.Add("sensors/a", []byte(`{"sensor":"b","ts":1,"value":1}`))
	f.Add("a/b/c", []byte(`{"sensor":"c","ts":9300000000000000,"value":1.7e308}`))
	f.Add("x", []byte(`{"sensor":"x","ts":"2262-04-12T00:00:00Z","value":1}`))
	now := time.Now()
	s, err := NewSource(WithServers("mqtt://127.0.0.1:1"), WithClientID("fuzz"), WithTopics("sensors/#"), WithDeadLetterTopic("dlq"),
		WithLimits(streaming.Limits{Now: func() time.Time { return now }}))
	if err != nil {
		f.Fatal(err)
	}
	keyRE := regexp.MustCompile(`^(?:` + streaming.DefaultKeyPattern + `)$`)
	f.Fuzz(func(t *testing.T, topic string, b []byte) {
		r, err := DecodeReading(b)
		if err != nil {
			return
		}
		if err := s.checkReading(topic, r); err != nil {
			if len(err.Error()) > 2048 {
				t.Fatalf("reason of %d bytes", len(err.Error()))
			}
			return
		}
		switch {
		case !keyRE.MatchString(r.Sensor):
			t.Fatalf("sensor %q accepted", r.Sensor)
		case !strings.HasSuffix(topic, r.Sensor) || (len(topic) > len(r.Sensor) && topic[len(topic)-len(r.Sensor)-1] != '/'):
			t.Fatalf("sensor %q accepted on topic %q", r.Sensor, topic)
		case math.Abs(r.Value) > streaming.DefaultMaxAbsValue:
			t.Fatalf("value %v accepted", r.Value)
		case r.TS > math.MaxInt64/int64(time.Millisecond) || r.TS < math.MinInt64/int64(time.Millisecond):
			t.Fatalf("ts %d accepted: ts × 1ms overflows", r.TS)
		case time.UnixMilli(r.TS).After(now.Add(streaming.DefaultMaxTSSkew)):
			t.Fatalf("ts %d accepted: past the skew", r.TS)
		}
	})
}

// TestDecodeReadingInConvertsRFC3339ToTheUnit: DecodeReadingIn takes a
// number as it is and converts an RFC 3339 ts to its unit.
func TestDecodeReadingInConvertsRFC3339ToTheUnit(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 123456789, time.UTC)
	for unit, want := range map[time.Duration]int64{
		time.Second: at.Unix(), time.Millisecond: at.UnixMilli(), time.Microsecond: at.UnixMicro(), time.Nanosecond: at.UnixNano(),
	} {
		r, err := DecodeReadingIn(unit)([]byte(`{"sensor":"s","ts":"2026-01-01T00:00:00.123456789Z","value":1}`))
		require.NoError(t, err)
		assert.Equal(t, want, r.TS, "unit %v", unit)
		r, err = DecodeReadingIn(unit)([]byte(`{"sensor":"s","ts":42,"value":1}`))
		require.NoError(t, err)
		assert.Equal(t, int64(42), r.TS, "unit %v", unit)
	}
}
