package badgerstore

import "errors"

// ErrClosed is returned by every method of a Store after Close.
var ErrClosed = errors.New("badger state store is closed")
