package toolbin

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// Path returns where the binary is looked for, and whether it exists.
func Path(name, envVar string) (string, bool) {
	if p := os.Getenv(envVar); p != "" {
		_, err := os.Stat(p)
		return p, err == nil
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", false
	}
	p := filepath.Join(filepath.Dir(file), "..", "..", "bin", name)
	_, err := os.Stat(p)
	return p, err == nil
}

// Require returns the binary's path, or skips (fails under
// TFLO_REQUIRE_SERVICES=1) the test when it is missing.
func Require(t testing.TB, name, envVar string) string {
	t.Helper()
	p, ok := Path(name, envVar)
	if !ok {
		msg := fmt.Sprintf("%s not found (looked at $%s and %s); `make tools` builds it", name, envVar, p)
		if os.Getenv("TFLO_REQUIRE_SERVICES") == "1" {
			t.Fatal(msg + " (TFLO_REQUIRE_SERVICES=1)")
		}
		t.Skip(msg)
	}
	return p
}
