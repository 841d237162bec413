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

// Two writers on one store: the compare-and-set of checkpoint manifests.
func TestConditionalSaverConformance(t *testing.T) {
	statetest.RunConditionalSaver(t, func(*testing.T) (a, b streaming.StateStore) {
		s := memory.New()
		return s, s
	})
}

func TestCursorConformance(t *testing.T) {
	statetest.RunCursorStore(t, func(*testing.T) streaming.CursorStore { return memory.New() })
}

func TestEpochClaimerConformance(t *testing.T) {
	s := memory.New() // every claimer the one store: claims are the process's
	statetest.RunEpochClaimer(t, func(*testing.T) streaming.EpochClaimer { return s })
}
