package pipeline

import (
	"math"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tflo-io/tflo/streaming"
)

var defaultKeyRE = regexp.MustCompile(`^(?:` + streaming.DefaultKeyPattern + `)$`)

// FuzzLimitedDecoder: what a pipeline hands its graph (the reading
// decoder behind the default Limits, as compile binds them) always keeps
// the limits, whatever the bytes: a key of the default pattern, a finite
// value within ±1e15, a ts that scales to int64 nanoseconds and is not far
// ahead of the clock.
func FuzzLimitedDecoder(f *testing.F) {
	for _, s := range []string{
		`{"sensor":"s-1","ts":1700000000000,"value":21.5}`, `{"sensor":"a/b","ts":1,"value":1}`,
		`{"sensor":"s","ts":9300000000000000,"value":1}`, `{"sensor":"s","ts":1,"value":1.7e308}`,
		`{"sensor":"` + strings.Repeat("k", 200) + `","ts":1,"value":1}`, `{"sensor":"\u00e9","ts":-1,"value":-0}`,
	} {
		f.Add([]byte(s))
	}
	now := time.Now()
	check, err := streaming.Limits{Now: func() time.Time { return now }}.Compile()
	if err != nil {
		f.Fatal(err)
	}
	dec := limitedDecoder{inner: ReadingDecoder{}, check: check}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := Record{Inputs: make([]streaming.Computed, 1)}
		if err := dec.Decode(Message{Topic: "readings", Value: b}, &r); err != nil {
			if len(err.Error()) > 2048 {
				t.Fatalf("error of %d bytes", len(err.Error()))
			}
			return
		}
		v := r.Inputs[0].Float64()
		switch {
		case !defaultKeyRE.Match(r.Key):
			t.Fatalf("key %q accepted", r.Key)
		case math.IsNaN(v) || math.Abs(v) > streaming.DefaultMaxAbsValue:
			t.Fatalf("value %v accepted", v)
		case r.TS > math.MaxInt64/int64(time.Millisecond) || r.TS < math.MinInt64/int64(time.Millisecond):
			t.Fatalf("ts %d accepted: ts × 1ms overflows", r.TS)
		case time.UnixMilli(r.TS).After(now.Add(streaming.DefaultMaxTSSkew)):
			t.Fatalf("ts %d accepted: past the skew", r.TS)
		}
	})
}
