package jsonscan

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSkipValue(t *testing.T) {
	deep := strings.Repeat("[", MaxDepth) + strings.Repeat("]", MaxDepth)
	for _, tc := range []struct {
		in   string
		want int // -1: gives up
	}{
		{`1`, 1}, {`-0.5e+3 `, 7}, {`"a b"`, 5}, {`true,`, 4}, {`null}`, 4},
		{`{}`, 2}, {`[]`, 2}, {`{ "a" : [1, {"b":null}] , "c":"d" }x`, 35}, {`[ 1 , 2 ]`, 9},
		{deep, len(deep)}, {"[" + deep + "]", -1},
		{`"a\"b"`, -1}, {`"é"`, -1}, {"\"a\tb\"", -1}, // escapes, non-ASCII, control bytes: encoding/json's
		{`{"a":1,}`, -1}, {`[1,]`, -1}, {`{"a" 1}`, -1}, {`{1:2}`, -1}, {`[1 2]`, -1}, {`{"a":}`, -1},
		{`-`, -1}, {`1.`, -1}, {`1e`, -1}, {`.5`, -1}, {`tru`, -1}, {`[`, -1}, {`{"a":1`, -1}, {``, -1},
	} {
		require.Equal(t, tc.want, SkipValue([]byte(tc.in), 0), "%q", tc.in)
	}
}

func TestMembers(t *testing.T) {
	b := []byte(` {"id":"s-1", "ts" : 17,"v":{"x":[1]},"id":"s-2","n":null} `)
	names := []string{"id", "ts", "v", "n", "absent"}
	vals := make([][]byte, len(names))
	end := Members(b, WS(b, 0), names, vals)
	require.Equal(t, len(b)-1, end)
	require.Equal(t, []string{`"s-2"`, `17`, `{"x":[1]}`, `null`}, []string{string(vals[0]), string(vals[1]), string(vals[2]), string(vals[3])})
	require.Nil(t, vals[4])
	require.Zero(t, testing.AllocsPerRun(100, func() { Members(b, 1, names, vals) }))
}

// FuzzSkipValue: what SkipValue takes whole is valid JSON.
func FuzzSkipValue(f *testing.F) {
	for _, s := range []string{`{"a":[1,{"b":null}],"c":"d"}`, `[1,2]`, `-0.5e3`, `{"a":1,}`, `01`, `"\u0041"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if end := SkipValue(b, WS(b, 0)); end >= 0 && WS(b, end) == len(b) && !json.Valid(b) {
			t.Fatalf("SkipValue took invalid JSON %q", b)
		}
	})
}

// FuzzMembers: wherever Members does not give up, it finds what
// encoding/json puts in a map[string]json.RawMessage.
func FuzzMembers(f *testing.F) {
	for _, s := range []string{
		`{"id":"s-1","ts":17,"value":21.5,"on":true}`, `{"id":1,"id":2,"value":[1, 2],"x":{}}`,
		`{"id":null}`, `{}`, `{"ts":01}`, `{"value":1}x`, `null`, `{"id":"\u0041"}`,
	} {
		f.Add([]byte(s))
	}
	names := []string{"id", "ts", "value", "on"}
	f.Fuzz(func(t *testing.T, b []byte) {
		vals := make([][]byte, len(names))
		if end := Members(b, WS(b, 0), names, vals); end < 0 || WS(b, end) != len(b) {
			return
		}
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			t.Fatalf("Members took what encoding/json refuses (%v): %q", err, b)
		}
		for i, n := range names {
			want, ok := obj[n]
			if ok != (vals[i] != nil) || string(want) != string(vals[i]) {
				t.Fatalf("member %q: %q, encoding/json %q (present %v) in %q", n, vals[i], want, ok, b)
			}
		}
	})
}

func TestFields(t *testing.T) {
	names := []string{"sensor", "ts"}
	read := func(in string) (got map[string]string, end int) {
		b := []byte(in)
		got = map[string]string{}
		end = Fields(b, 0, names, func(k, at int) int {
			j := SkipValue(b, at)
			if j >= 0 {
				got[names[k]] = string(b[at:j])
			}
			return j
		})
		return got, end
	}
	got, end := read(`{"x":{"ts":1},"sensor":"a","ts":2}`)
	require.Equal(t, 34, end)
	require.Equal(t, map[string]string{"sensor": `"a"`, "ts": "2"}, got)
	for _, in := range []string{
		`{"sensor":"a","Sensor":"b"}`, // encoding/json takes Sensor for the field too
		`{"ts":1,"ts":2}`,             // and checks both
		`{"sensor":"a","ts":1,}`,
	} {
		_, end := read(in)
		require.Equal(t, -1, end, in)
	}
}

// TestInt: Int takes what encoding/json reads into an int64 and nothing
// else; it took +1 and leading zeros (01, 0000000000000000001).
func TestInt(t *testing.T) {
	for _, in := range []string{
		"0", "-0", "7", "-12", "9223372036854775807", "-9223372036854775808", "123456789012345678",
		"+1", "01", "-01", "00", "0000000000000000001", "+9223372036854775807", "1.0", "1e2",
		"9223372036854775808", "", "-", " 1", "1 ", "null", "0x10", "1_000",
	} {
		n, ok := Int([]byte(in))
		var want int64
		err := json.Unmarshal([]byte(in), &want)
		wantOK := err == nil && in == strings.TrimSpace(in) && in != "null"
		require.Equal(t, wantOK, ok, "%q (encoding/json: %v)", in, err)
		if ok {
			require.Equal(t, want, n, "%q", in)
		}
	}
}

// FuzzInt: Int agrees with encoding/json reading an int64.
func FuzzInt(f *testing.F) {
	for _, s := range []string{"0", "-12", "+1", "01", "9223372036854775808", "1e2"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		n, ok := Int(b)
		var want int64
		err := json.Unmarshal(b, &want)
		if wantOK := err == nil && string(b) == strings.TrimSpace(string(b)) && string(b) != "null"; ok != wantOK || ok && n != want {
			t.Fatalf("Int(%q) = %d, %v; encoding/json %d, %v", b, n, ok, want, err)
		}
	})
}

// FuzzFields: wherever Fields does not give up, it finds the members
// encoding/json puts in the fields of a struct.
func FuzzFields(f *testing.F) {
	for _, s := range []string{
		`{"sensor":"a","ts":1}`, `{"x":{"ts":1},"sensor":"a","ts":2}`, `{"Sensor":"a"}`, `{"ts":1,"ts":2}`,
		`{"sensor":null}`, `{}`, `{"ts":01}`, `{"sensor":"a"}x`, `null`, `{"sensor":"\u0041"}`, `[1]`,
	} {
		f.Add([]byte(s))
	}
	names := []string{"sensor", "ts"}
	f.Fuzz(func(t *testing.T, b []byte) {
		var got [2][]byte
		end := Fields(b, WS(b, 0), names, func(k, at int) int {
			j := SkipValue(b, at)
			if j >= 0 {
				got[k] = b[at:j]
			}
			return j
		})
		if end < 0 || WS(b, end) != len(b) {
			return
		}
		var want struct {
			Sensor json.RawMessage `json:"sensor"`
			TS     json.RawMessage `json:"ts"`
		}
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("Fields took what encoding/json refuses (%v): %q", err, b)
		}
		if string(got[0]) != string(want.Sensor) || string(got[1]) != string(want.TS) {
			t.Fatalf("Fields found %q, %q; encoding/json %q, %q in %q", got[0], got[1], want.Sensor, want.TS, b)
		}
	})
}
