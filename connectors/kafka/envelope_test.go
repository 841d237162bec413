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
