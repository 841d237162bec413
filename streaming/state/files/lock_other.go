//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package files

import (
	"fmt"
	"os"
)

// lockFolder opens path without locking it: on this platform the store
// relies on the caller to run one process per folder.
func lockFolder(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open lock file: %w", err)
	}
	return f, nil
}
