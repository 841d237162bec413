package main

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestBinariesLinkNoDevStack: the production binaries under workers/cmd
// (and the example worker programs under workers/examples)
// link none of the embedded development servers (kfake, mochi-mqtt, the
// test MQTT broker, internal/devstack) nor the test suite; those stay in
// `starter demo` and the tests.
func TestBinariesLinkNoDevStack(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/tflo-io/tflo/workers/cmd/...", "github.com/tflo-io/tflo/workers/examples/...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	deps := strings.Fields(string(out))
	require.Contains(t, deps, "github.com/tflo-io/tflo/pipeline", "the listing names the binaries' dependencies")
	for _, d := range deps {
		for _, banned := range []string{"github.com/twmb/franz-go/pkg/kfake", "github.com/mochi-mqtt/", "github.com/tflo-io/tflo/internal/devstack", "github.com/tflo-io/tflo/testsuite"} {
			require.False(t, strings.HasPrefix(d, banned), "workers/cmd links %s", d)
		}
	}
}
