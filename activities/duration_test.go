package activities_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/tflo-io/tflo/activities"
)

func TestDurationReadsAsText(t *testing.T) {
	type in struct {
		Interval activities.Duration `json:"interval" yaml:"interval"`
	}
	b, err := json.Marshal(in{Interval: activities.Duration(5 * time.Second)})
	require.NoError(t, err)
	require.JSONEq(t, `{"interval":"5s"}`, string(b))

	for _, tc := range []struct {
		name, json string
		want       time.Duration
	}{
		{"text", `{"interval":"1m30s"}`, 90 * time.Second},
		{"nanoseconds, as older histories wrote it", `{"interval":5000000000}`, 5 * time.Second},
		{"null", `{"interval":null}`, 0},
		// Read as 1ns before: the scan stopped at the "e".
		{"nanoseconds in exponent form", `{"interval":1e9}`, time.Second},
		{"nanoseconds in exponent form with a fraction", `{"interval":1.5e9}`, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got in
			require.NoError(t, json.Unmarshal([]byte(tc.json), &got))
			require.Equal(t, tc.want, got.Interval.D())
		})
	}
	var got in
	require.ErrorContains(t, json.Unmarshal([]byte(`{"interval":"5 parsecs"}`), &got), `duration "5 parsecs"`)
	require.ErrorContains(t, json.Unmarshal([]byte(`{"interval":true}`), &got), "want a string")
	require.ErrorContains(t, json.Unmarshal([]byte(`{"interval":1.5}`), &got), "duration 1.5: not a whole number of nanoseconds")
	require.ErrorContains(t, json.Unmarshal([]byte(`{"interval":1e30}`), &got), "duration 1e30: not a whole number")

	require.NoError(t, yaml.Unmarshal([]byte("interval: 250ms\n"), &got))
	require.Equal(t, 250*time.Millisecond, got.Interval.D())
}
