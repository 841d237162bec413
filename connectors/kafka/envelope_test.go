package kafka

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
)

type alarm struct {
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
}

func TestEnvelopeVersions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		in      string
		want    streaming.Signal[int, alarm]
		wantSrc *EnvelopeSource
		wantErr error
	}{
		{
			name: "v1 written before v2 existed",
			in:   `{"v":1,"key":"s-1","ts":17,"mode":1,"payload":{"value":30.5,"threshold":25}}`,
			want: streaming.Signal[int, alarm]{Key: "s-1", TS: 17, Mode: 1, Payload: alarm{30.5, 25}},
		},
		{
			name:    "v2 with source and epoch",
			in:      `{"v":2,"compat":1,"key":"s-2","ts":18,"mode":0,"payload":{"value":1,"threshold":2},"source":{"topic":"readings","partition":3,"offset":99},"epoch":4294967297}`,
			want:    streaming.Signal[int, alarm]{Key: "s-2", TS: 18, Mode: 0, Payload: alarm{1, 2}},
			wantSrc: &EnvelopeSource{"readings", 3, 99},
		},
		{
			name: "v3 additive (compat 2): unknown fields ignored",
			in:   `{"v":3,"compat":2,"key":"s-3","ts":19,"mode":2,"payload":{"value":5,"threshold":6,"unit":"C"},"trace":"abc"}`,
			want: streaming.Signal[int, alarm]{Key: "s-3", TS: 19, Mode: 2, Payload: alarm{5, 6}},
		},
		{name: "v3 incompatible", in: `{"v":3,"compat":3,"key":"s","ts":1,"mode":1,"payload":{}}`, wantErr: ErrUnsupportedEnvelope},
		{name: "v4 without compat means compat 4", in: `{"v":4,"key":"s","ts":1,"mode":1,"payload":{}}`, wantErr: ErrUnsupportedEnvelope},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sig, env, err := DecodeSignal[int, alarm]([]byte(tc.in))
			if tc.wantErr != nil {
				require.ErrorIs(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, sig)
			require.Equal(t, tc.wantSrc, env.Source)
		})
	}
	for _, bad := range []string{`{}`, `{"v":0}`, `nope`, `{"v":"2"}`} {
		_, _, err := DecodeSignal[int, alarm]([]byte(bad))
		require.Error(t, err, bad)
	}
}

func TestEnvelopeRoundTrip(t *testing.T) {
	sig := streaming.Signal[string, alarm]{Key: "s-9", TS: 123, Mode: "high", Payload: alarm{31, 30}}
	b, err := EncodeSignal(sig, &EnvelopeSource{"readings", 1, 7}, 42)
	require.NoError(t, err)
	got, env, err := DecodeSignal[string, alarm](b)
	require.NoError(t, err)
	require.Equal(t, sig, got)
	require.Equal(t, EnvelopeVersion, env.V)
	require.Equal(t, uint64(42), env.Epoch)
	// A version-1 reader (the v1 struct) still reads a v2 envelope.
	var v1 struct {
		V       int    `json:"v"`
		Key     string `json:"key"`
		TS      int64  `json:"ts"`
		Mode    string `json:"mode"`
		Payload alarm  `json:"payload"`
	}
	require.NoError(t, json.Unmarshal(b, &v1))
	require.Equal(t, "s-9", v1.Key)
	require.Equal(t, alarm{31, 30}, v1.Payload)
}

func ExampleDecodeSignal() {
	// An envelope written by a version-1 producer, read by this build.
	sig, env, err := DecodeSignal[string, float64]([]byte(`{"v":1,"key":"s-1","ts":5,"mode":"high","payload":31.5}`))
	fmt.Println(sig.Key, sig.TS, sig.Mode, sig.Payload, env.Source == nil, err)
	// Output: s-1 5 high 31.5 true <nil>
}

// TestDecodeSignalFields: what EncodeSignal writes (and the usual
// variations of it) takes the fast path, allocation-free; the rest gets
// DecodeSignal's answer.
func TestDecodeSignalFields(t *testing.T) {
	names := []string{"smoothed", "raw", "absent"}
	edge, err := EncodeSignal(streaming.Signal[string, json.RawMessage]{Key: "s-1", TS: 1700, Mode: "raised",
		Payload: json.RawMessage(`{"smoothed":26.5,"raw":null,"topic":"sensors/s-1"}`)},
		&EnvelopeSource{Topic: "readings", Partition: 3, Offset: 42}, 7)
	require.NoError(t, err)
	for _, tc := range []struct {
		name    string
		in      string
		fast    bool
		key     string
		ts      int64
		vals    []string // "" for absent
		wantErr string
	}{
		{name: "as EncodeSignal writes it", in: string(edge), fast: true, key: "s-1", ts: 1700, vals: []string{"26.5", "null", ""}},
		{name: "version 1", in: `{"v":1,"key":"k","ts":-5,"mode":2,"payload":{"raw":1e3}}`, fast: true, key: "k", ts: -5, vals: []string{"", "1e3", ""}},
		{name: "nested values", in: `{"v":2,"key":"k","ts":1,"mode":{"a":[]},"payload":{"smoothed":{"x": [1, 2]},"other":[{}]},"x":{"y":"z"}}`,
			fast: true, key: "k", ts: 1, vals: []string{`{"x": [1, 2]}`, "", ""}},
		{name: "repeated payload field: the last", in: `{"v":2,"key":"k","ts":1,"payload":{"raw":1,"raw":2}}`, fast: true, key: "k", ts: 1, vals: []string{"", "2", ""}},
		{name: "null payload", in: `{"v":2,"key":"k","ts":1,"payload":null}`, fast: true, key: "k", ts: 1, vals: []string{"", "", ""}},
		{name: "escaped key (slow path)", in: `{"v":2,"key":"s\u002d1","ts":1,"payload":{"raw":3}}`, key: "s-1", ts: 1, vals: []string{"", "3", ""}},
		{name: "field spelt in capitals (slow path)", in: `{"V":2,"KEY":"k","ts":1,"payload":{"raw":3}}`, key: "k", ts: 1, vals: []string{"", "3", ""}},
		{name: "repeated payload (slow path: merged)", in: `{"v":2,"key":"k","ts":1,"payload":{"raw":3},"payload":{"smoothed":4}}`, key: "k", ts: 1, vals: []string{"4", "3", ""}},
		{name: "newer reader needed", in: `{"v":3,"compat":3,"key":"k","ts":1}`, wantErr: "needs a reader of version 3"},
		{name: "no version", in: `{"key":"k","ts":1}`, wantErr: "missing or invalid version"},
		{name: "float ts", in: `{"v":2,"key":"k","ts":1.5}`, wantErr: "cannot unmarshal"},
		{name: "partition out of range", in: `{"v":2,"key":"k","ts":1,"source":{"partition":2147483648}}`, wantErr: "cannot unmarshal"},
		{name: "payload not an object", in: `{"v":2,"key":"k","ts":1,"payload":31.5}`, wantErr: "cannot unmarshal"},
		{name: "trailing garbage", in: string(edge) + "x", wantErr: "invalid character"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vals := make([][]byte, len(names))
			_, _, fast := scanSignal([]byte(tc.in), names, vals)
			require.Equal(t, tc.fast, fast, "fast path")
			key, ts, err := DecodeSignalFields([]byte(tc.in), names, vals)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.key, string(key))
			require.Equal(t, tc.ts, ts)
			for i, want := range tc.vals {
				if want == "" {
					require.Nil(t, vals[i], names[i])
				} else {
					require.Equal(t, want, string(vals[i]), names[i])
				}
			}
		})
	}
	in := []byte(edge)
	vals := make([][]byte, len(names))
	require.Zero(t, testing.AllocsPerRun(100, func() {
		if _, _, err := DecodeSignalFields(in, names, vals); err != nil {
			t.Fatal(err)
		}
	}), "allocations per envelope")
}

// BenchmarkDecodeSignalFields: an edge signal's envelope, read by the
// scanner, and by encoding/json into the map it replaces.
func BenchmarkDecodeSignalFields(b *testing.B) {
	env, err := EncodeSignal(streaming.Signal[string, json.RawMessage]{Key: "sensor-0042", TS: 1700000000123, Mode: "raised",
		Payload: json.RawMessage(`{"smoothed":26.734,"raw":26.1,"topic":"sensors/sensor-0042"}`)},
		&EnvelopeSource{Topic: "readings", Partition: 3, Offset: 123456}, 7)
	if err != nil {
		b.Fatal(err)
	}
	names := []string{"smoothed", "raw"}
	b.Run("scanner", func(b *testing.B) {
		vals := make([][]byte, len(names))
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := DecodeSignalFields(env, names, vals); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		vals := make([][]byte, len(names))
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := slowSignalFields(env, names, vals); err != nil {
				b.Fatal(err)
			}
		}
	})
}
