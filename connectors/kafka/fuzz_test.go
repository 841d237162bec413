package kafka

import (
	"math"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/streaming"
)

// FuzzDecodeSignal: the envelope decoder (central reads edge signals with
// it) refuses garbage with an error, never a panic, and what it accepts
// encodes and decodes to the same signal.
func FuzzDecodeSignal(f *testing.F) {
	f.Add([]byte(`{"v":2,"compat":1,"key":"s-1","ts":5,"mode":"high","payload":31.5,"source":{"topic":"t","partition":1,"offset":9},"epoch":3}`))
	f.Add([]byte(`{"v":1,"key":"s-1","ts":5,"mode":"low","payload":1}`))
	f.Add([]byte(`{"v":9,"compat":9}`))
	f.Add([]byte(`{"v":0}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		sig, env, err := DecodeSignal[string, float64](b)
		if err != nil {
			return
		}
		again, err := EncodeSignal(sig, env.Source, streaming.Epoch(env.Epoch))
		if err != nil {
			t.Fatalf("decoded signal %+v does not encode: %v", sig, err)
		}
		sig2, _, err := DecodeSignal[string, float64](again)
		if err != nil || sig2.Key != sig.Key || sig2.TS != sig.TS || sig2.Mode != sig.Mode ||
			(sig2.Payload != sig.Payload && !(math.IsNaN(sig.Payload) && math.IsNaN(sig2.Payload))) {
			t.Fatalf("round trip of %+v: %+v, %v", sig, sig2, err)
		}
	})
}

// FuzzDeadLetterHeaders: whatever headers a producer sends, its dead
// letter carries exactly one of each tflo-dlq-* header, all the source's
// own, and the truncated copy of any dead letter is small.
func FuzzDeadLetterHeaders(f *testing.F) {
	f.Add("tflo-dlq-error", []byte("forged"), "TFLO-DLQ-TOPIC", []byte("x"), []byte("k"), []byte("v"), "bad")
	f.Add("trace", []byte("1"), "tflo-dlq-truncated", []byte("value"), []byte(strings.Repeat("k", 3000)), []byte(strings.Repeat("v", 40000)), strings.Repeat("e", 2000))
	f.Fuzz(func(t *testing.T, k1 string, v1 []byte, k2 string, v2 []byte, key, value []byte, cause string) {
		rec := &kgo.Record{Topic: "readings", Partition: 3, Offset: 77, Key: key, Value: value,
			Headers: []kgo.RecordHeader{{Key: k1, Value: v1}, {Key: k2, Value: v2}}}
		dl := DeadLetter("readings.dlq", "central", rec, errString(cause))
		own := map[string]string{HeaderDLQTopic: "readings", HeaderDLQPartition: "3", HeaderDLQOffset: "77", HeaderDLQGroup: "central"}
		seen := map[string]int{}
		for _, h := range dl.Headers {
			if !isDLQHeader(h.Key) {
				continue
			}
			seen[h.Key]++
			if w, ok := own[h.Key]; ok && string(h.Value) != w {
				t.Fatalf("header %s = %q, want %q", h.Key, h.Value, w)
			}
		}
		if len(seen) != 5 {
			t.Fatalf("dead letter tflo-dlq-* headers %v", seen)
		}
		for k, n := range seen {
			if n != 1 {
				t.Fatalf("header %s appears %d times", k, n)
			}
		}
		small := TruncateDeadLetter(dl)
		if recordBytes(small) > 20<<10 {
			t.Fatalf("truncated dead letter of %d bytes", recordBytes(small))
		}
	})
}

type errString string

func (e errString) Error() string { return string(e) }

// FuzzDecodeSignalFields: the envelope's fast path (scanSignal) agrees
// with DecodeSignal wherever it does not give up: the same key, ts and
// payload fields, and never an envelope DecodeSignal refuses.
func FuzzDecodeSignalFields(f *testing.F) {
	for _, s := range []string{
		`{"v":2,"compat":1,"key":"s-1","ts":5,"mode":"high","payload":{"smoothed":31.5,"raw":31,"topic":"sensors/s-1"},"source":{"topic":"t","partition":1,"offset":9},"epoch":3}`,
		`{"v":1,"key":"s-1","ts":5,"mode":"low","payload":{"raw":1,"raw":2}}`,
		`{"v":2,"key":"k","ts":-1,"mode":{"a":[1,{"b":null}]},"payload":{"smoothed":[1,2],"x":{"y":true}},"extra":[]}`,
		`{"v":2,"key":"k","ts":1,"payload":null,"source":null,"epoch":18446744073709551615}`,
		`{"v":2,"key":"k","ts":1,"source":{"partition":2147483648}}`,
		`{"v":2,"Key":"k","ts":1}`, `{"v":2,"key":"k","key":"j","ts":1}`, `{"v":9,"compat":9,"key":"k"}`,
		`{"v":2,"key":"","ts":1}`, `{"v":2.0,"key":"k"}`, `{"v":2,"key":"k","epoch":-0}`, `{"v":2,"key":"k\u0031","ts":1}`,
	} {
		f.Add([]byte(s))
	}
	names := []string{"smoothed", "raw", "missing"}
	f.Fuzz(func(t *testing.T, b []byte) {
		vals := make([][]byte, len(names))
		key, ts, ok := scanSignal(b, names, vals)
		if !ok {
			return
		}
		svals := make([][]byte, len(names))
		skey, sts, err := slowSignalFields(b, names, svals)
		if err != nil {
			t.Fatalf("fast path accepted what DecodeSignal refuses (%v): %q", err, b)
		}
		if string(key) != string(skey) || ts != sts {
			t.Fatalf("fast (%q, %d) != slow (%q, %d) for %q", key, ts, skey, sts, b)
		}
		for i := range names {
			if (vals[i] == nil) != (svals[i] == nil) || string(vals[i]) != string(svals[i]) {
				t.Fatalf("payload field %q: fast %q != slow %q for %q", names[i], vals[i], svals[i], b)
			}
		}
	})
}
