package streaming

import (
	"bytes"
	"context"
	"fmt"
	"slices"
)

// StateStore is durable per-key state (the seeds' AsyncStateStore).
//
// Keys are arbitrary bytes (slashes, dots, binary); stores must round-trip
// them exactly. All methods honour ctx cancellation and are safe for
// concurrent use. Byte slices passed in are not retained after the call
// returns; slices returned are owned by the caller.
type StateStore interface {
	// Save stores s under key, replacing any previous snapshot.
	Save(ctx context.Context, key []byte, s Snapshot) error
	// Load returns key's snapshot, or an error wrapping ErrNotFound.
	Load(ctx context.Context, key []byte) (Snapshot, error)
	// ListKeys returns every stored key, in no particular order.
	ListKeys(ctx context.Context) ([][]byte, error)
	// SaveBatch stores several snapshots. Backends whose requests cost
	// money must do this in a bounded number of requests, not one per key.
	SaveBatch(ctx context.Context, items []KeyedSnapshot) error
	// Delete removes key; deleting an absent key is not an error.
	Delete(ctx context.Context, key []byte) error
}

// EpochClaimer hands out the epochs of the runs of a shard no consumer
// group assigns (an MQTT source's), so that two runs started at once
// from one checkpoint get different epochs and the older one's commits
// are fenced. A worker claims them in its coordination store, or, with
// none, in a durable store that is an EpochClaimer (the S3 store).
type EpochClaimer interface {
	// ClaimEpoch claims under name (dot-separated tokens of
	// [A-Za-z0-9_=-], a coordination key) the lowest epoch, at least
	// atLeast, past every epoch claimed under name before. The error wraps
	// errors.ErrUnsupported when the store, as configured, cannot refuse
	// a second claim of an epoch.
	ClaimEpoch(ctx context.Context, name string, atLeast Epoch) (Epoch, error)
}

// KeyedSnapshot is one item of a SaveBatch.
type KeyedSnapshot struct {
	Key      []byte
	Snapshot Snapshot
}

// ConditionalSaver is the optional capability of a StateStore whose saves
// can be compare-and-sets, like the S3 store's conditional manifest
// writes: a Checkpointer commits its manifests with it, so that a zombie
// owner that read the manifest just before a newer owner committed cannot
// replace the newer one.
type ConditionalSaver interface {
	// SaveIfUnchanged stores each item whose key still holds the snapshot
	// the item's Read holds (nil: nothing), compared and written as one
	// step that no other SaveIfUnchanged of the key comes between.
	// refused[i] is nil for an item stored, or an error naming its key and
	// wrapping ErrConflict for one refused, which changed nothing. err is
	// the failure of the call (then refused is nil, and an item may or may
	// not have been stored).
	SaveIfUnchanged(ctx context.Context, items []ConditionalSave) (refused []error, err error)
}

// ConditionalSave is one item of a SaveIfUnchanged.
type ConditionalSave struct {
	KeyedSnapshot
	// Read is what the writer read under Key (Load's snapshot), nil if it
	// found nothing stored.
	Read *Snapshot
}

// Unchanged reports whether stored (nil: nothing stored under the item's
// key) is what the item's Read holds; a store implementing
// SaveIfUnchanged compares with it.
func (c ConditionalSave) Unchanged(stored *Snapshot) bool {
	if c.Read == nil || stored == nil {
		return c.Read == nil && stored == nil
	}
	a, b := c.Read, stored
	return a.Meta.FormatVersion == b.Meta.FormatVersion && a.Meta.CursorType == b.Meta.CursorType &&
		bytes.Equal(a.Meta.Cursor, b.Meta.Cursor) && a.Meta.Epoch == b.Meta.Epoch &&
		slices.Equal(a.Meta.Operators, b.Meta.Operators) && slices.Equal(a.Meta.DroppedNodes, b.Meta.DroppedNodes) &&
		a.Meta.SchemaFingerprint == b.Meta.SchemaFingerprint &&
		a.Meta.CreatedUnixNano == b.Meta.CreatedUnixNano && bytes.Equal(a.Data, b.Data)
}

// SaveBatchSequential implements SaveBatch with one Save per item, for
// stores without a batch API. It stops at the first error, which names the
// key.
func SaveBatchSequential(ctx context.Context, s interface {
	Save(context.Context, []byte, Snapshot) error
}, items []KeyedSnapshot) error {
	for _, it := range items {
		if err := ctx.Err(); err != nil {
			return err
		}
		if err := s.Save(ctx, it.Key, it.Snapshot); err != nil {
			return fmt.Errorf("save batch: key %q: %w", it.Key, err)
		}
	}
	return nil
}
