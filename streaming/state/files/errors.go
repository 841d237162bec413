package files

import "errors"

// ErrClosed is returned by every method of a Store after Close.
var ErrClosed = errors.New("files state store is closed")

// ErrLocked is returned by Open when another process holds the folder.
var ErrLocked = errors.New("files state store folder is locked by another process")
