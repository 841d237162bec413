package activities

import (
	"fmt"
	"math"
	"strconv"
	"time"
)

// Duration is a time.Duration that reads and writes as text ("5s",
// "1m30s") in JSON and YAML, so workflow inputs and results read as
// durations in the Temporal web UI instead of raw nanoseconds
// ("interval": 5000000000). A plain JSON number is still read as
// nanoseconds, so histories and configs written before it decode.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String is time.Duration's String.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration %q: %w", b, err)
	}
	*d = Duration(v)
	return nil
}

// UnmarshalJSON reads a quoted duration ("5s") or, as older inputs wrote
// it, a number of nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		if len(b) < 2 || b[len(b)-1] != '"' {
			return fmt.Errorf("duration %s: unterminated string", b)
		}
		return d.UnmarshalText(b[1 : len(b)-1])
	}
	if string(b) == "null" {
		return nil
	}
	// The whole token: fmt.Sscan stopped at the first byte an integer
	// cannot hold, so 1e9 read as 1ns. A number written in exponent form
	// (as JavaScript and other encoders do) is taken when it is a whole
	// number of nanoseconds a Duration holds.
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		f, ferr := strconv.ParseFloat(string(b), 64)
		if ferr != nil {
			return fmt.Errorf("duration %s: want a string such as \"5s\" or a number of nanoseconds", b)
		}
		if f != math.Trunc(f) || f < math.MinInt64 || f >= math.MaxInt64 {
			return fmt.Errorf("duration %s: not a whole number of nanoseconds a duration holds (up to about 292 years); write it as a string such as \"5s\"", b)
		}
		n = int64(f)
	}
	*d = Duration(n)
	return nil
}
