package keyedstate

import "errors"

// ErrClosed is returned by calls on a Runtime after Close.
var ErrClosed = errors.New("keyedstate: runtime closed")

// ErrCutPending is returned by Cut while an earlier cut has not been
// released: at most one cut is pending per runtime.
var ErrCutPending = errors.New("keyedstate: a cut is already pending")

// ErrTooManyKeys is wrapped by Tx.Eval's error for a record of a new key
// while the runtime holds its cap of keys (WithMaxKeys): the record is
// refused, the runtime carries on.
var ErrTooManyKeys = errors.New("keyedstate: key cap reached")

// ErrBudgetTooSmall is wrapped by New's (and Resize's) error when the
// memory budget, after the GC headroom, Badger's memtables and caches,
// the write batches and the admission sketch, holds no key.
var ErrBudgetTooSmall = errors.New("keyedstate: memory budget too small")

// ErrKeyTooLong is wrapped by Tx.Eval's and Tx.Delete's error for a key
// that, with the runtime's prefix, is longer than Badger stores
// (MaxKeyBytes): the record is refused, the runtime carries on.
var ErrKeyTooLong = errors.New("keyedstate: key too long")
