package pipeline

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/internal/jsonscan"
	"github.com/tflo-io/tflo/streaming"
)

func bindJSON(t *testing.T) Decoder {
	t.Helper()
	d, err := JSONDecoder{Key: "sym", Time: "ts"}.BindInputs([]string{"px", "live"})
	require.NoError(t, err)
	return d
}

// TestJSONDecoder: a flat JSON record, read by the scanner where it can
// and by encoding/json where it cannot, with the same results and errors.
func TestJSONDecoder(t *testing.T) {
	none := streaming.Computed{}
	for _, tc := range []struct {
		name    string
		in      string
		fast    bool // the scanner reads it
		key     string
		ts      int64
		inputs  []streaming.Computed
		wantErr string
	}{
		{name: "plain", in: `{"sym":"AAPL","ts":5,"px":1.5,"live":true}`, fast: true, key: "AAPL", ts: 5, inputs: []streaming.Computed{streaming.Float(1.5), streaming.Bool(true)}},
		{name: "number key, null and absent inputs", in: ` {"sym":42, "ts":-1, "px":null} `, fast: true, key: "42", ts: -1, inputs: []streaming.Computed{none, none}},
		{name: "number key past a float's range", in: `{"sym":1e400,"ts":1}`, fast: true, key: "1e400", ts: 1, inputs: []streaming.Computed{none, none}},
		{name: "nested unknown members", in: `{"meta":{"a":[1,{"b":"c"}]},"sym":"X","ts":1,"px":2}`, fast: true, key: "X", ts: 1, inputs: []streaming.Computed{streaming.Float(2), none}},
		{name: "repeated member: the last", in: `{"sym":"A","sym":"B","ts":1,"px":1,"px":3}`, fast: true, key: "B", ts: 1, inputs: []streaming.Computed{streaming.Float(3), none}},
		{name: "escaped key (encoding/json)", in: `{"sym":"A\u0042","ts":1,"live":false}`, key: "AB", ts: 1, inputs: []streaming.Computed{none, streaming.Bool(false)}},
		{name: "non-ASCII elsewhere (encoding/json)", in: `{"sym":"A","ts":1,"px":1,"note":"café"}`, key: "A", ts: 1, inputs: []streaming.Computed{streaming.Float(1), none}},
		{name: "missing key", in: `{"ts":1,"px":1}`, fast: true, wantErr: `json record: missing key field "sym"`},
		{name: "empty key", in: `{"sym":"","ts":1}`, fast: true, wantErr: `key field "sym" is not a non-empty string`},
		{name: "escaped control byte in the key", in: `{"sym":"\u0000","ts":1}`, key: "\x00", ts: 1, inputs: []streaming.Computed{none, none}},
		{name: "key neither string nor number", in: `{"sym":[1],"ts":1}`, fast: true, wantErr: `key field "sym" is [1], want a string or a number`},
		{name: "float time", in: `{"sym":"A","ts":1.5}`, fast: true, wantErr: `time field "ts" is 1.5, want an integer`},
		{name: "missing time", in: `{"sym":"A","ts":null}`, fast: true, wantErr: `missing time field "ts"`},
		{name: "string input", in: `{"sym":"A","ts":1,"px":"1.5"}`, fast: true, wantErr: `json record: field "px": "1.5" is not a finite number or a boolean`},
		{name: "not JSON", in: `{"sym":"A","ts":1,}`, wantErr: `json record: invalid character '}'`},
		// Bug: it was worded by encoding/json ("json record: json: cannot
		// unmarshal array into Go value of type map[string]json.RawMessage").
		{name: "not an object", in: `[1]`, wantErr: `json record: want a JSON object with key field "sym" and time field "ts", got an array`},
		{name: "a number", in: `7`, wantErr: `json record: want a JSON object with key field "sym" and time field "ts", got a number`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := bindJSON(t).(jsonBound)
			b := []byte(tc.in)
			vals := make([][]byte, len(d.names))
			end := jsonscan.Members(b, jsonscan.WS(b, 0), d.names, vals)
			require.Equal(t, tc.fast, end >= 0 && jsonscan.WS(b, end) == len(b), "read by the scanner")
			r := Record{Inputs: make([]streaming.Computed, 2)}
			err := d.Decode(Message{Value: b}, &r)
			if tc.wantErr != "" {
				require.ErrorContains(t, err, tc.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.key, string(r.Key))
			require.Equal(t, tc.ts, r.TS)
			require.Equal(t, tc.inputs, r.Inputs)
		})
	}
	d := bindJSON(t)
	m := Message{Value: []byte(`{"sym":"AAPL","ts":5,"px":1.5,"live":true,"venue":"XNAS"}`)}
	r := Record{Inputs: make([]streaming.Computed, 2)}
	require.Zero(t, testing.AllocsPerRun(100, func() { require.NoError(t, d.Decode(m, &r)) }), "allocations per record")
}

// TestSignalEnvelopeDecoder: the payload fields an envelope carries are
// the graph's inputs; what EncodeSignal writes decodes allocation-free;
// an envelope without a ts is refused (it was read at ts 0).
func TestSignalEnvelopeDecoder(t *testing.T) {
	d, err := SignalEnvelopeDecoder{}.BindInputs([]string{"smoothed", "raw"})
	require.NoError(t, err)
	b, err := kafka.EncodeSignal(streaming.Signal[string, json.RawMessage]{Key: "s-1", TS: 9, Mode: "raised",
		Payload: json.RawMessage(`{"smoothed":26.5,"raw":null}`)}, &kafka.EnvelopeSource{Topic: "t", Partition: 1, Offset: 2}, 3)
	require.NoError(t, err)
	r := Record{Inputs: make([]streaming.Computed, 2)}
	require.NoError(t, d.Decode(Message{Value: b}, &r))
	require.Equal(t, "s-1", string(r.Key))
	require.Equal(t, int64(9), r.TS)
	require.Equal(t, []streaming.Computed{streaming.Float(26.5), {}}, r.Inputs)
	require.Zero(t, testing.AllocsPerRun(100, func() { require.NoError(t, d.Decode(Message{Value: b}, &r)) }), "allocations per envelope")

	for in, want := range map[string]string{
		`{"v":2,"key":"","ts":1}`:                        "signal envelope without a key",
		`{"v":2,"key":"k","ts":1,"payload":{"raw":"x"}}`: `signal envelope: payload field "raw": "x" is not a finite number or a boolean`,
		`{"v":2,"key":"k","ts":1,"payload":[]}`:          "decode signal envelope",
		// No ts (or a null one) was read as ts 0, a signal of 1970.
		`{"v":2,"key":"k","payload":{"raw":1}}`:           `decode signal envelope of key "k": missing ts`,
		`{"v":2,"key":"k","ts":null,"payload":{"raw":1}}`: `decode signal envelope of key "k": missing ts`,
	} {
		err := d.Decode(Message{Value: []byte(in)}, &Record{Inputs: make([]streaming.Computed, 2)})
		require.ErrorContains(t, err, want, in)
	}
}

// FuzzJSONDecoder: wherever the scanner reads a record (the fast path),
// it finds the members encoding/json finds, so both paths decode it
// alike (decode.go's comment promised this fuzz test; there was none).
func FuzzJSONDecoder(f *testing.F) {
	for _, s := range []string{`{"sym":"AAPL","ts":5,"px":1.5,"live":true}`, ` {"sym":42, "ts":-1, "px":null} `,
		`{"meta":{"a":[1,{"b":"c"}]},"sym":"X","ts":1,"px":2}`, `{"sym":"A","sym":"B","ts":1,"px":1,"px":3}`, `{"sym":1e400,"ts":1}`,
		`{"sym":"A","ts":1.5}`, `{"sym":"A","ts":1,"px":"1.5"}`, `{"sym":"A","ts":1,}`, `[1]`, `{"sym":"A","ts":01}`} {
		f.Add([]byte(s))
	}
	d, err := JSONDecoder{Key: "sym", Time: "ts"}.BindInputs([]string{"px", "live"})
	require.NoError(f, err)
	names := d.(jsonBound).names
	f.Fuzz(func(t *testing.T, b []byte) {
		vals := make([][]byte, len(names))
		end := jsonscan.Members(b, jsonscan.WS(b, 0), names, vals)
		if end < 0 || jsonscan.WS(b, end) != len(b) {
			return // the scanner gave up: encoding/json decodes it
		}
		var obj map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(b, &obj), "the scanner read %q, encoding/json refuses it", b)
		for i, n := range names {
			require.Equal(t, string(obj[n]), string(vals[i]), "member %q of %q", n, b)
		}
	})
}
