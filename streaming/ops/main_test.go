package ops

import (
	"testing"

	"github.com/tflo-io/tflo/internal/benchratio"
)

// TestMain measures the benchmark baselines before any benchmark runs
// (same process, same run), so benchratio.Report only reads them.
func TestMain(m *testing.M) {
	benchratio.Main(m, map[string]func(*testing.B){
		"handloop":     baselineEdge,
		"handloop100k": baselineKeyed,
	})
}
