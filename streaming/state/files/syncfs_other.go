//go:build !linux

package files

import (
	"errors"
	"os"
)

const haveSyncfs = false

func syncfs(*os.File) error { return errors.New("syncfs is only available on Linux") }
