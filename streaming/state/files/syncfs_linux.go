//go:build linux

package files

import (
	"os"

	"golang.org/x/sys/unix"
)

const haveSyncfs = true

// syncfs flushes the file system holding f: every dirty page and inode on
// it, including all the temporary files a batch just wrote.
func syncfs(f *os.File) error { return unix.Syncfs(int(f.Fd())) }
