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
