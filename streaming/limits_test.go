package streaming_test

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

func TestLimitsDefaults(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c, err := streaming.Limits{Now: func() time.Time { return now }}.Compile()
	require.NoError(t, err)
	ms := now.UnixMilli()
	f := func(v float64) []streaming.Computed { return []streaming.Computed{streaming.Float(v)} }
	cases := []struct {
		name  string
		key   string
		ts    int64
		in    []streaming.Computed
		field string // "" = accepted
	}{
		{"plain", "boiler-1", ms, f(21.5), ""},
		{"all key characters", "Az09._:-", ms, f(0), ""},
		{"128-byte key", strings.Repeat("k", 128), ms, f(0), ""},
		{"old ts (replay)", "s", 0, f(0), ""},
		{"ts just inside the skew", "s", ms + time.Hour.Milliseconds(), f(0), ""},
		{"big finite value", "s", ms, f(-1e15), ""},
		{"ints and bools pass", "s", ms, []streaming.Computed{streaming.Int(math.MaxInt64), streaming.Bool(true), streaming.None()}, ""},
		{"empty key", "", ms, f(0), "key"},
		{"slash in key", "a/b", ms, f(0), "key"},
		{"129-byte key", strings.Repeat("k", 129), ms, f(0), "key"},
		{"megabyte key", strings.Repeat("k", 1<<20), ms, f(0), "key"},
		{"newline in key", "a\n", ms, f(0), "key"},
		{"value 1.7e308", "s", ms, f(1.7e308), "value"},
		{"NaN", "s", ms, f(math.NaN()), "value"},
		{"-Inf", "s", ms, f(math.Inf(-1)), "value"},
		{"signal payload", "s", ms, []streaming.Computed{streaming.Sig(1, 1e300)}, "value"},
		{"far future", "s", ms + 2*time.Hour.Milliseconds(), f(0), "ts"},
		{"overflows ns", "s", math.MaxInt64 / 1000, f(0), "ts"},
		{"overflows ns negative", "s", math.MinInt64 / 1000, f(0), "ts"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := c.Check([]byte(tc.key), tc.ts, tc.in)
			if tc.field == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, streaming.ErrOutOfLimits)
			var le *streaming.LimitError
			require.True(t, errors.As(err, &le))
			require.Equal(t, tc.field, le.Field)
			require.Less(t, len(err.Error()), 300, "a long key is shortened in the message")
		})
	}
}

func TestLimitsConfigured(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c, err := streaming.Limits{KeyPattern: `sensor/[0-9]+`, MaxKeyBytes: 12, MaxAbsValue: 100, MaxTSSkew: -1, MaxTSAge: time.Hour,
		TSUnit: time.Second, Now: func() time.Time { return now }}.Compile()
	require.NoError(t, err)
	s := now.Unix()
	require.NoError(t, c.Check([]byte("sensor/1"), s+1e6, nil), "no future bound")
	require.ErrorContains(t, c.Check([]byte("sensor/x"), s, nil), "does not match sensor/[0-9]+")
	require.ErrorContains(t, c.Check([]byte("sensor/123456"), s, nil), "longer than 12 bytes")
	require.ErrorContains(t, c.CheckValue(100.5), "outside ±100")
	require.NoError(t, c.CheckTS(s-3599))
	require.ErrorContains(t, c.CheckTS(s-3601), "behind the clock")
	require.ErrorContains(t, c.CheckTS(math.MinInt64/int64(time.Second)), "behind the clock")
}

func TestLimitsValidate(t *testing.T) {
	require.NoError(t, streaming.Limits{}.Validate())
	err := streaming.Limits{KeyPattern: "(", MaxAbsValue: -1, MaxTSAge: -time.Second, TSUnit: -1}.Validate()
	require.ErrorContains(t, err, "key pattern")
	// The error quotes the pattern as written, not its anchored form.
	require.ErrorContains(t, err, "limits: key pattern \"(\": error parsing regexp: missing closing ): `(`")
	require.ErrorContains(t, err, "max absolute value")
	require.ErrorContains(t, err, "max ts age")
	require.ErrorContains(t, err, "ts unit")
}

func TestQuoteKey(t *testing.T) {
	require.Equal(t, `"s-1"`, streaming.QuoteKey("s-1"))
	long := strings.Repeat("é", 100) // 200 bytes, two per rune
	q := streaming.QuoteKey([]byte(long))
	require.Equal(t, `"`+strings.Repeat("é", 32)+`"… (200 bytes)`, q)
	q = streaming.QuoteKey("a" + strings.Repeat("é", 100)) // the cut falls inside a rune
	require.Equal(t, `"a`+strings.Repeat("é", 31)+`"… (201 bytes)`, q)
}

// FuzzLimits: the check never panics on any key, ts or value, accepts
// only what the bounds allow, and its messages stay short.
func FuzzLimits(f *testing.F) {
	f.Add([]byte("s-1"), int64(1767225600000), 21.5)
	f.Add([]byte(strings.Repeat("é", 300)), int64(math.MaxInt64), math.Inf(1))
	f.Add([]byte{0xff, 0xfe}, int64(math.MinInt64), -1e308)
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c, err := streaming.Limits{Now: func() time.Time { return now }}.Compile()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, key []byte, ts int64, v float64) {
		err := c.Check(key, ts, []streaming.Computed{streaming.Float(v)})
		if err2 := c.CheckReading(string(key), ts, v); (err == nil) != (err2 == nil) {
			t.Fatalf("Check and CheckReading disagree: %v, %v", err, err2)
		}
		if err != nil {
			if !errors.Is(err, streaming.ErrOutOfLimits) || len(err.Error()) > 400 {
				t.Fatalf("error %q", err)
			}
			return
		}
		if len(key) == 0 || len(key) > 128 || math.IsNaN(v) || math.Abs(v) > 1e15 || ts > now.Add(time.Hour).UnixMilli() {
			t.Fatalf("accepted %q, %d, %v", key, ts, v)
		}
		for _, b := range key {
			if !strings.ContainsRune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-", rune(b)) {
				t.Fatalf("accepted key %q", key)
			}
		}
		q := streaming.QuoteKey(key)
		if len(q) > 4*64+40 {
			t.Fatalf("QuoteKey of %d bytes", len(q))
		}
	})
}
