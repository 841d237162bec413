package memory_test

import (
	"testing"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/statetest"
)

func TestConformance(t *testing.T) {
	statetest.Run(t, func(*testing.T) streaming.StateStore { return memory.New() })
}

func TestCursorConformance(t *testing.T) {
	statetest.RunCursorStore(t, func(*testing.T) streaming.CursorStore { return memory.New() })
}

func TestEpochClaimerConformance(t *testing.T) {
	s := memory.New() // every claimer the one store: claims are the process's
	statetest.RunEpochClaimer(t, func(*testing.T) streaming.EpochClaimer { return s })
}
