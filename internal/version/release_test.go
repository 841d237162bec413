package version

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// SECURITY.md says which versions receive security fixes; it must agree
// with the releases CHANGELOG.md records. Bug: it said "tflo has no
// tagged release yet" after the CHANGELOG recorded 0.1.0 as the first
// tagged version, so a reporter could not tell whether 0.1.0 is supported.
func TestSecurityPolicyNamesTheLatestRelease(t *testing.T) {
	root := filepath.Join("..", "..")
	changelog, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	require.NoError(t, err)
	security, err := os.ReadFile(filepath.Join(root, "SECURITY.md"))
	require.NoError(t, err)
	m := regexp.MustCompile(`(?m)^## \[(\d+)\.(\d+)\.\d+\]`).FindSubmatch(changelog)
	require.NotNil(t, m, "CHANGELOG.md records no release")
	policy := strings.Join(strings.Fields(string(security)), " ")
	require.False(t, strings.Contains(policy, "no tagged release"), "SECURITY.md says nothing is tagged; CHANGELOG.md records %s", m[0][3:])
	minor := string(m[1]) + "." + string(m[2]) + ".x"
	require.True(t, strings.Contains(policy, minor), "SECURITY.md does not name the latest minor version, %s, as the one receiving security fixes", minor)
}
