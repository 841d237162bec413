package statetest_test

import (
	"testing"

	"github.com/tflo-io/tflo/internal/benchratio"
)

func TestMain(m *testing.M) {
	benchratio.Main(m, benchratio.Baselines{
		"BenchmarkCheckpointSaveBatch100k": {"badger-writebatch": baselineWriteBatch},
		"BenchmarkRestoreLoad100k":         {"badger-gets": baselineBadgerGets},
	})
}
