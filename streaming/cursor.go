package streaming

import "context"

// Cursor is a durable stream position. Each concrete type has a parse
// function (ParseKafkaOffset, ParseMQTTCursor) that reverses Bytes.
type Cursor interface {
	// Bytes encodes the cursor; the result is owned by the caller.
	Bytes() []byte
	// String formats the cursor for logs and status queries.
	String() string
}

// CursorRecord is what a CursorStore persists for one key: the cursor
// bytes, their type, and the owner epoch and checkpoint they were written
// under.
type CursorRecord struct {
	// Type names the cursor encoding ("kafka", "mqtt", ...).
	Type string `json:"type"`
	// Cursor is Cursor.Bytes of the position.
	Cursor []byte `json:"cursor"`
	// Epoch is the owner epoch of the writer.
	Epoch Epoch `json:"epoch"`
	// CheckpointID is the checkpoint whose state save this cursor follows.
	CheckpointID uint64 `json:"checkpoint_id"`
}

// CursorStore persists cursors by key (a shard, a partition, a split).
//
// SaveCursor refuses, with an error wrapping ErrFenced, a record whose
// Epoch is below the stored one: a zombie owner's write changes nothing.
// LoadCursor returns an error wrapping ErrNotFound for an unknown key.
// Implementations are safe for concurrent use.
type CursorStore interface {
	SaveCursor(ctx context.Context, key []byte, rec CursorRecord) error
	LoadCursor(ctx context.Context, key []byte) (CursorRecord, error)
}
