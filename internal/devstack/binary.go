package devstack

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Binary returns the path of the server binary name (for example
// "temporal" or "influxd"): $envVar when set, else <repo>/bin/<name>
// (the folder `make tools` builds into), else name on $PATH. The error
// wraps ErrNoBinary and says where it looked.
func Binary(name, envVar string) (string, error) {
	if p := os.Getenv(envVar); p != "" {
		if _, err := os.Stat(p); err != nil {
			return p, fmt.Errorf("%s: $%s=%s: %w", name, envVar, p, ErrNoBinary)
		}
		return p, nil
	}
	var repoBin string
	if _, file, _, ok := runtime.Caller(0); ok {
		repoBin = filepath.Join(filepath.Dir(file), "..", "..", "bin", name)
		if _, err := os.Stat(repoBin); err == nil {
			return filepath.Clean(repoBin), nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return repoBin, fmt.Errorf("%s not found (looked at $%s, %s and $PATH; `make tools` builds it): %w", name, envVar, filepath.Clean(repoBin), ErrNoBinary)
}
