package split

import (
	"errors"
	"testing"
)

// FuzzDecodeRecords feeds arbitrary bytes, as read from a store, to every
// record decoder: they never panic, fail only with ErrCorruptRecord, and
// whatever decodes survives an encode/decode round trip.
func FuzzDecodeRecords(f *testing.F) {
	f.Add([]byte(`{"epoch":3,"status":"owned","owner":"w1","attempts":1,"watermark":42,"state":"AQI="}`))
	f.Add([]byte(`{"generation":2,"leader":"w1","assign":{"s1":"w2"}}`))
	f.Add([]byte(`{"id":"s1","weight":2,"descriptor":"eA=="}`))
	f.Add([]byte(`{"owner":"w","instance":"i","epoch":9}`))
	f.Add([]byte(`nul`))
	f.Fuzz(func(t *testing.T, b []byte) {
		check := func(err error) {
			if err != nil && !errors.Is(err, ErrCorruptRecord) {
				t.Fatalf("decoder error does not wrap ErrCorruptRecord: %v", err)
			}
		}
		p, err := decode[Progress]("prog.x", b)
		check(err)
		if err == nil {
			if q, err := decode[Progress]("prog.x", encode(p)); err != nil || q.Epoch != p.Epoch || q.Watermark != p.Watermark || q.Status != p.Status {
				t.Fatalf("progress round trip: %+v -> %+v (%v)", p, q, err)
			}
		}
		_, err = decode[Plan]("plan", b)
		check(err)
		_, err = decode[Spec]("spec.x", b)
		check(err)
		_, err = decode[Lease]("lease.x", b)
		check(err)
		_, err = decode[Presence]("worker.x", b)
		check(err)
	})
}
