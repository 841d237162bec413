package coordination

import (
	"errors"
	"fmt"
)

// ErrRetryable is wrapped by every transient store error: the operation may
// succeed if retried (timeouts, lost connections, a broken watch stream).
var ErrRetryable = errors.New("retryable store error")

// ErrFatal is wrapped by every unrecoverable store error: misconfiguration,
// an unsupported server, corrupt state, an invalid key.
var ErrFatal = errors.New("fatal store error")

// ErrNotFound is wrapped by the error Get returns for an absent key (never
// written, deleted, or expired). It is neither retryable nor fatal.
var ErrNotFound = errors.New("key not found")

// StoreError is the typed error of a store operation. errors.Is matches its
// Kind (ErrRetryable, ErrFatal or ErrNotFound) and its cause.
type StoreError struct {
	Op       string   // "create", "update", "get", "delete", "watch", "list", "open"
	Keyspace Keyspace // zero when not about one keyspace
	Key      string   // key or prefix, when known
	Kind     error    // ErrRetryable, ErrFatal or ErrNotFound
	Err      error    // the cause, may be nil
}

// Error names the operation, the keyspace and key, and the cause.
func (e *StoreError) Error() string {
	msg := e.Kind.Error() + ": " + e.Op
	if e.Keyspace != 0 {
		msg += " " + e.Keyspace.String()
	}
	if e.Key != "" {
		msg += " " + QuoteKey(e.Key)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the kind and the cause.
func (e *StoreError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// Retryable wraps err as a transient failure of op on key.
func Retryable(op string, ks Keyspace, key string, err error) error {
	return &StoreError{Op: op, Keyspace: ks, Key: key, Kind: ErrRetryable, Err: err}
}

// Fatal wraps err as an unrecoverable failure of op on key.
func Fatal(op string, ks Keyspace, key string, err error) error {
	return &StoreError{Op: op, Keyspace: ks, Key: key, Kind: ErrFatal, Err: err}
}

// NotFound is the error Get returns for an absent key.
func NotFound(ks Keyspace, key string) error {
	return &StoreError{Op: "get", Keyspace: ks, Key: key, Kind: ErrNotFound}
}

// IsRetryable reports whether err is a transient store error.
func IsRetryable(err error) bool { return errors.Is(err, ErrRetryable) }

// IsFatal reports whether err is an unrecoverable store error.
func IsFatal(err error) bool { return errors.Is(err, ErrFatal) }

// quoteKeyMax is how much of a key QuoteKey shows.
const quoteKeyMax = 64

// QuoteKey quotes key for a message, cutting a long one to its first bytes
// and its length, so a hostile key cannot flood a log line.
func QuoteKey(key string) string {
	if len(key) <= quoteKeyMax {
		return fmt.Sprintf("%q", key)
	}
	return fmt.Sprintf("%q…(%d bytes)", key[:quoteKeyMax], len(key))
}
