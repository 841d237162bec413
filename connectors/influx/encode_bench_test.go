package influx_test

import (
	"testing"

	"github.com/tflo-io/tflo/connectors/influx"
)

// BenchmarkAppendLine: encoding cost per point.
func BenchmarkAppendLine(b *testing.B) {
	pts := genPoints("bench", 0, 1024)
	var buf []byte
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		var err error
		if buf, err = influx.AppendLine(buf[:0], pts[i&1023]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
