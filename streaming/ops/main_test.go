package ops

import (
	"testing"

	"github.com/tflo-io/tflo/internal/benchratio"
)

// TestMain measures the benchmark baselines before any benchmark runs
// (same process, same run), so benchratio.Report only reads them.
func TestMain(m *testing.M) {
	benchratio.Main(m, benchratio.Baselines{
		"BenchmarkEdgeGraph":      {"handloop": baselineEdge},
		"BenchmarkKeyedGraph100k": {"handloop100k": baselineKeyed},
	})
}
