package coordination

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Keyspace selects which half of the store an operation targets.
type Keyspace uint8

const (
	// Durable keys never expire; they survive owner death (split records,
	// the plan record).
	Durable Keyspace = iota + 1
	// Ephemeral keys expire LeaseTTL after their last write on the store's
	// clock; every write re-arms the clock and expiry reaches watchers as a
	// Delete event.
	Ephemeral
)

// String returns "durable" or "ephemeral".
func (k Keyspace) String() string {
	switch k {
	case Durable:
		return "durable"
	case Ephemeral:
		return "ephemeral"
	}
	return fmt.Sprintf("keyspace(%d)", uint8(k))
}

// Revision is a store-assigned version token, strictly increasing per key.
// It is content-independent, so it carries none of the ABA hazards of a
// content hash. The zero Revision is never assigned.
type Revision uint64

// Entry is one key's current value and the revision of the write that
// produced it.
type Entry struct {
	Key      string
	Value    []byte
	Revision Revision
}

// CasOutcome is the result of a conditional write. Losing is a protocol
// outcome (someone else won the race), never an error.
type CasOutcome struct {
	won bool
	rev Revision
}

// Lost is the outcome of a write whose precondition failed: the key existed
// (Create) or had moved past the expected revision (Update, Delete).
var Lost = CasOutcome{}

// WonAt is the outcome of a write that landed at rev. rev is 0 only for a
// vacuous Delete of an absent key that wrote nothing.
func WonAt(rev Revision) CasOutcome { return CasOutcome{won: true, rev: rev} }

// Won reports whether the write landed.
func (o CasOutcome) Won() bool { return o.won }

// Revision is the revision the write landed at; 0 when Lost.
func (o CasOutcome) Revision() Revision { return o.rev }

// String renders "won@rev" or "lost".
func (o CasOutcome) String() string {
	if !o.won {
		return "lost"
	}
	return fmt.Sprintf("won@%d", o.rev)
}

// EventKind says what a WatchEvent reports.
type EventKind uint8

const (
	// EventPut carries a key's current value (snapshot replay or live update).
	EventPut EventKind = iota + 1
	// EventDelete says the key is gone — explicit delete or ephemeral expiry.
	// Its Revision is the deletion's own revision, strictly greater than
	// every revision the key held before: a consumer that rewrote the key
	// must ignore a delete whose revision is below its own write's (the stale
	// echo of an older deletion).
	EventDelete
	// EventSnapshotDone marks the end of the initial snapshot; everything
	// after it is live.
	EventSnapshotDone
)

// String names the kind.
func (k EventKind) String() string {
	switch k {
	case EventPut:
		return "put"
	case EventDelete:
		return "delete"
	case EventSnapshotDone:
		return "snapshot-done"
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// WatchEvent is one observation from a keyspace watch. For EventDelete the
// Entry has a Key and Revision but no Value; for EventSnapshotDone it is
// empty.
type WatchEvent struct {
	Kind EventKind
	Entry
}

// Watcher is a running prefix watch. A goroutine owned by the backend feeds
// Events; it stops, and Events is closed, when Close is called, the Watch
// context ends, or the stream breaks.
type Watcher interface {
	// Events delivers the snapshot, one EventSnapshotDone, then live events,
	// ordered per key. It is closed when the watch ends.
	Events() <-chan WatchEvent
	// Err reports why Events was closed: nil after Close or context
	// cancellation, otherwise an error wrapping ErrRetryable (a broken
	// stream: re-watch) or ErrFatal. Call it only after Events is closed.
	Err() error
	// Close stops the watch and waits for its goroutine to exit. Idempotent.
	Close() error
}

// Store is the coordination-store contract; see the package documentation
// for the notes every implementation must honour. ctx bounds each call
// (for Watch, the lifetime of the watch).
type Store interface {
	// LeaseTTL is the TTL every Ephemeral write re-arms, fixed at
	// construction (per-write TTLs are not portable).
	LeaseTTL() time.Duration
	// Create writes key if it is absent (deleted and expired keys are
	// absent); Lost if it is live.
	Create(ctx context.Context, ks Keyspace, key string, value []byte) (CasOutcome, error)
	// Update replaces key iff its current revision is expected; Lost when
	// the key moved on or is absent. The revision of a delete or an expiry
	// never matches: the key is absent at it.
	Update(ctx context.Context, ks Keyspace, key string, value []byte, expected Revision) (CasOutcome, error)
	// Get reads key's current value; an absent key is an error wrapping
	// ErrNotFound.
	Get(ctx context.Context, ks Keyspace, key string) (Entry, error)
	// Delete removes key; with expected != 0 only if it is still at that
	// revision. Deleting an absent key wins vacuously.
	Delete(ctx context.Context, ks Keyspace, key string, expected Revision) (CasOutcome, error)
	// Watch streams a snapshot of every live key under prefix, then
	// EventSnapshotDone, then live updates, until ctx ends or Close.
	Watch(ctx context.Context, ks Keyspace, prefix string) (Watcher, error)
	// List is a point-in-time listing of every live key under prefix,
	// sorted by key.
	List(ctx context.Context, ks Keyspace, prefix string) ([]Entry, error)
}

// MaxKeyLen is the longest portable key, in bytes. NATS carries a key in
// the subject of a protocol line the server caps at 4 KiB (a longer one
// closes the connection), and a listing or watch holds every key in
// memory; 1 KiB leaves room for the bucket name and the reply subject.
const MaxKeyLen = 1024

// ValidKey reports whether key is portable across backends: one or more
// dot-separated tokens of [A-Za-z0-9_=-], at most MaxKeyLen bytes.
func ValidKey(key string) bool {
	if key == "" || len(key) > MaxKeyLen {
		return false
	}
	for tok := range strings.SplitSeq(key, ".") {
		if tok == "" {
			return false
		}
		for i := 0; i < len(tok); i++ {
			c := tok[i]
			switch {
			case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-', c == '=':
			default:
				return false
			}
		}
	}
	return true
}

// ValidPrefix reports whether prefix is portable: empty, or a valid key
// followed by a dot.
func ValidPrefix(prefix string) bool {
	if prefix == "" {
		return true
	}
	return strings.HasSuffix(prefix, ".") && ValidKey(strings.TrimSuffix(prefix, "."))
}

// CheckKey returns a Fatal StoreError naming key when it is not portable.
func CheckKey(op string, ks Keyspace, key string) error {
	if ValidKey(key) {
		return nil
	}
	if len(key) > MaxKeyLen {
		return Fatal(op, ks, key, fmt.Errorf("key is %d bytes, above the %d-byte limit", len(key), MaxKeyLen))
	}
	return Fatal(op, ks, key, errors.New("key is not dot-separated tokens of [A-Za-z0-9_=-]"))
}

// CheckPrefix returns a Fatal StoreError naming prefix when it is not
// portable.
func CheckPrefix(op string, ks Keyspace, prefix string) error {
	if ValidPrefix(prefix) {
		return nil
	}
	return Fatal(op, ks, prefix, fmt.Errorf("prefix must be empty or a valid key (at most %d bytes) followed by a dot", MaxKeyLen))
}
