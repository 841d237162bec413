package streaming_test

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
)

func TestBreaker(t *testing.T) {
	const threshold, coolDown = 3, 10 * time.Second
	type step struct {
		do        string // "allow", "ok", "fail", "wait"
		d         time.Duration
		wantErr   bool
		wantState string // "" = not checked
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"opens after N consecutive failures", []step{
			{do: "fail", wantState: "closed"},
			{do: "fail", wantState: "closed"},
			{do: "allow", wantState: "closed"},
			{do: "fail", wantState: "open"},
			{do: "allow", wantErr: true, wantState: "open"},
		}},
		{"a success resets the count", []step{
			{do: "fail"}, {do: "fail"}, {do: "ok", wantState: "closed"},
			{do: "fail"}, {do: "fail", wantState: "closed"},
			{do: "allow", wantState: "closed"},
		}},
		{"stays open for the cool-down then half-opens", []step{
			{do: "fail"}, {do: "fail"}, {do: "fail", wantState: "open"},
			{do: "wait", d: coolDown - time.Nanosecond, wantState: "open"},
			{do: "allow", wantErr: true, wantState: "open"},
			{do: "wait", d: time.Nanosecond, wantState: "half-open"},
		}},
		{"half-open lets one probe through and closes on its success", []step{
			{do: "fail"}, {do: "fail"}, {do: "fail"},
			{do: "wait", d: coolDown},
			{do: "allow", wantState: "half-open"},
			{do: "allow", wantErr: true, wantState: "half-open"},
			{do: "ok", wantState: "closed"},
			{do: "allow", wantState: "closed"},
			{do: "fail", wantState: "closed"},
		}},
		{"a failed probe reopens for another cool-down", []step{
			{do: "fail"}, {do: "fail"}, {do: "fail"},
			{do: "wait", d: coolDown},
			{do: "allow", wantState: "half-open"},
			{do: "fail", wantState: "open"},
			{do: "allow", wantErr: true},
			{do: "wait", d: coolDown / 2, wantState: "open"},
			{do: "wait", d: coolDown / 2, wantState: "half-open"},
			{do: "allow"},
			{do: "ok", wantState: "closed"},
		}},
		{"a late success from a call admitted before it opened does not close it", []step{
			{do: "fail"}, {do: "fail"}, {do: "fail", wantState: "open"},
			{do: "ok", wantState: "open"},
			{do: "allow", wantErr: true, wantState: "open"},
			{do: "wait", d: coolDown, wantState: "half-open"},
			{do: "allow"},
			{do: "ok", wantState: "closed"},
		}},
		{"a probe that never reports is forgotten after the probe timeout", []step{
			{do: "fail"}, {do: "fail"}, {do: "fail"},
			{do: "wait", d: coolDown},
			{do: "allow"},
			{do: "wait", d: time.Minute - time.Nanosecond},
			{do: "allow", wantErr: true},
			{do: "wait", d: time.Nanosecond},
			{do: "allow", wantState: "half-open"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := newFakeClock()
			b, err := streaming.NewBreaker(threshold, coolDown, time.Minute, clk.Now)
			require.NoError(t, err)
			for i, s := range tc.steps {
				switch s.do {
				case "allow":
					err := b.Allow()
					if s.wantErr {
						require.ErrorIs(t, err, streaming.ErrBreakerOpen, "step %d", i)
					} else {
						require.NoError(t, err, "step %d", i)
					}
				case "ok":
					b.Success()
				case "fail":
					b.Failure()
				case "wait":
					clk.Advance(s.d)
				}
				if s.wantState != "" {
					require.Equal(t, s.wantState, b.State().String(), "step %d (%s)", i, s.do)
				}
			}
		})
	}
}

func TestBreakerValidation(t *testing.T) {
	_, err := streaming.NewBreaker(0, time.Second, 0, nil)
	require.ErrorContains(t, err, "threshold 0")
	_, err = streaming.NewBreaker(1, 0, 0, nil)
	require.ErrorContains(t, err, "cool-down")
	_, err = streaming.NewBreaker(1, time.Second, -time.Second, nil)
	require.ErrorContains(t, err, "probe timeout -1s must not be negative")
}

func TestBreakerErrorSaysWhen(t *testing.T) {
	clk := newFakeClock()
	b, err := streaming.NewBreaker(1, 10*time.Second, 0, clk.Now)
	require.NoError(t, err)
	b.Failure()
	clk.Advance(4 * time.Second)
	err = b.Allow()
	require.True(t, errors.Is(err, streaming.ErrBreakerOpen))
	require.ErrorContains(t, err, "next probe in 6s")
	require.Equal(t, 1, b.ConsecutiveFailures())
}
