package toolbin

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/tflo-io/tflo/internal/devstack"
)

// Path returns where the binary is looked for, and whether it exists.
func Path(name, envVar string) (string, bool) {
	if p := os.Getenv(envVar); p != "" {
		_, err := os.Stat(p)
		return p, err == nil
	}
	p := filepath.Join(Root(), "bin", name)
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

// Root is the repository's root folder, from this file's place in it.
func Root() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("toolbin: no caller information")
	}
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// GoBuild builds tflo's programs pkgs (package paths from the
// repository's root: "./workers/cmd/worker") into dir with `go build`,
// as a user does, each named after its folder; ldflags are passed to the
// linker when not empty (-X to stamp a version). Its error carries go
// build's output.
func GoBuild(dir, ldflags string, pkgs ...string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("the go command builds the programs under test: %w", err)
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if ldflags != "" {
		args = append(args, "-ldflags", ldflags)
	}
	cmd := exec.Command(goBin, append(args, pkgs...)...)
	cmd.Dir = Root()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %v: %w\n%s", pkgs, err, out)
	}
	return nil
}

// RequireStack skips the test (fails it under TFLO_REQUIRE_SERVICES=1)
// unless the dev stack (internal/devstack, which runs iot-portal) finds
// its Temporal and InfluxDB servers where it looks for them
// (devstack.Binary: the variable, the repository's bin folder, $PATH).
func RequireStack(t testing.TB) {
	t.Helper()
	for _, b := range [][2]string{{"temporal", "TFLO_TEMPORAL"}, {"influxd", "TFLO_INFLUXD"}} {
		if _, err := devstack.Binary(b[0], b[1]); err != nil {
			if os.Getenv("TFLO_REQUIRE_SERVICES") == "1" {
				t.Fatal(err)
			}
			t.Skip(err)
		}
	}
}
