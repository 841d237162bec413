package split_test

import (
	"testing"

	"github.com/tflo-io/tflo/internal/benchratio"
)

func TestMain(m *testing.M) {
	benchratio.Main(m, map[string]func(*testing.B){
		"sort-10k-splits":       baselineSort,
		"store-writes-91-moves": baselineMoves,
	})
}
