package kafka

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
	"github.com/twmb/franz-go/pkg/kgo"
)

func decodeOne(b []byte) (Decoded, error) {
	d := Decoded{Inputs: make([]streaming.Computed, 1)}
	err := JSONReadingDecoder{}.Decode(&kgo.Record{Value: b}, &d)
	return d, err
}

func TestJSONReadingDecoder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		key     string
		ts      int64
		v       float64
		wantErr string
	}{
		{name: "plain", in: `{"sensor":"s-1","ts":17,"value":21.5}`, key: "s-1", ts: 17, v: 21.5},
		{name: "order and spaces", in: " { \"value\" : -1e3 ,\n\"ts\":0, \"sensor\":\"a b\" } ", key: "a b", ts: 0, v: -1000},
		{name: "unknown fields skipped", in: `{"unit":"C","sensor":"x","ok":true,"n":null,"ts":5,"value":1,"f":-0.5}`, key: "x", ts: 5, v: 1},
		{name: "nested unknown", in: `{"sensor":"x","meta":{"a":[1,2]},"ts":5,"value":2}`, key: "x", ts: 5, v: 2},
		{name: "escaped sensor (slow path)", in: `{"sensor":"s\u002d1","ts":1,"value":3}`, key: "s-1", ts: 1, v: 3},
		{name: "case-insensitive field (slow path)", in: `{"Sensor":"k","TS":2,"Value":4}`, key: "k", ts: 2, v: 4},
		{name: "duplicate field: last wins", in: `{"sensor":"a","sensor":"b","ts":1,"value":1}`, key: "b", ts: 1, v: 1},
		{name: "string value", in: `{"sensor":"s","ts":1,"value":"hot"}`, wantErr: `sensor reading: field "value" is a string, want a number`},
		{name: "float ts", in: `{"sensor":"s","ts":1.5,"value":1}`, wantErr: `sensor reading: field "ts" is number 1.5, want an integer of Unix milliseconds (or of the spec's time_unit)`},
		// Bug: a field of the wrong type was dead-lettered in encoding/json's
		// words ("json: cannot unmarshal string into Go struct field
		// jsonReading.ts of type int64"), an RFC 3339 ts (which only an MQTT
		// source takes) the likeliest.
		{name: "RFC 3339 ts", in: `{"sensor":"s","ts":"2026-01-01T00:00:00Z","value":1}`, wantErr: `sensor reading: field "ts" is a string, want an integer of Unix milliseconds (or of the spec's time_unit)`},
		{name: "number sensor", in: `{"sensor":7,"ts":1,"value":1}`, wantErr: `sensor reading: field "sensor" is a number, want a string`},
		{name: "missing sensor", in: `{"ts":1,"value":1}`, wantErr: `missing "sensor"`},
		{name: "empty sensor", in: `{"sensor":"","ts":1,"value":1}`, wantErr: `missing "sensor"`},
		{name: "null value", in: `{"sensor":"s","ts":1,"value":null}`, wantErr: `missing "value"`},
		{name: "missing ts", in: `{"sensor":"s","value":1}`, wantErr: `missing "ts"`},
		{name: "trailing garbage", in: `{"sensor":"s","ts":1,"value":1} x`, wantErr: "invalid character"},
		{name: "not an object", in: `[1]`, wantErr: "sensor reading: want a JSON object with sensor, ts and value, got an array"},
		{name: "empty", in: ``, wantErr: "unexpected end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := decodeOne([]byte(tc.in))
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.key, string(d.Key))
			require.Equal(t, tc.ts, d.TS)
			require.Equal(t, tc.v, d.Inputs[0].Float64())
		})
	}
}

// FuzzJSONReadingDecoder: the fast scanner must agree with encoding/json
// (the slow path) on every input: same success, same values.
func FuzzJSONReadingDecoder(f *testing.F) {
	for _, s := range []string{
		`{"sensor":"s-1","ts":17,"value":21.5}`, `{"value":1e-3,"ts":-4,"sensor":"x","u":"C"}`,
		`{"sensor":"a","sensor":null,"ts":1,"value":1}`, `{"sensor":"s","ts":01,"value":1}`,
		`{"sensor":"s","ts":1,"value":1,}`, `{"sensor":"s","ts":9223372036854775808,"value":1}`,
		`{"sensor":"s","ts":1,"value":1e999}`, ` {"sensor":"\u00e9","ts":1,"value":-0}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		key, ts, v, err := scanReading(b)
		skey, sts, sv, serr := slowReading(b)
		if err == errFallback {
			return
		}
		if err != nil || serr != nil {
			t.Fatalf("fast err %v, slow err %v for %q", err, serr, b)
		}
		if string(key) != string(skey) || ts != sts || v != sv {
			t.Fatalf("fast (%q,%d,%v) != slow (%q,%d,%v) for %q", key, ts, v, skey, sts, sv, b)
		}
	})
}

func BenchmarkDecodeJSON(b *testing.B) {
	rec := &kgo.Record{Value: []byte(`{"sensor":"sensor-0042","ts":1700000000123,"value":21.734}`)}
	b.Run("scanner", func(b *testing.B) {
		d := Decoded{Inputs: make([]streaming.Computed, 1)}
		b.ReportAllocs()
		for b.Loop() {
			if err := (JSONReadingDecoder{}).Decode(rec, &d); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("scanner+limits", func(b *testing.B) { // what a pipeline runs: the default Limits after the scanner
		check, err := streaming.Limits{}.Compile()
		if err != nil {
			b.Fatal(err)
		}
		d := Decoded{Inputs: make([]streaming.Computed, 1)}
		b.ReportAllocs()
		for b.Loop() {
			if err := (JSONReadingDecoder{}).Decode(rec, &d); err != nil {
				b.Fatal(err)
			}
			if err := check.Check(d.Key, d.TS, d.Inputs); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			var r jsonReading
			if err := json.Unmarshal(rec.Value, &r); err != nil {
				b.Fatal(err)
			}
		}
	})
}
