package streaming

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrNotFound is returned by StateStore.Load and CursorStore.Load when the
// key has nothing stored. Stores never return a nil value with a nil error.
var ErrNotFound = errors.New("not found")

// ErrCorrupt is wrapped by errors for bytes that fail their checksum or
// cannot be decoded (snapshots, cursors, state blobs).
var ErrCorrupt = errors.New("corrupt data")

// ErrOutOfLimits is wrapped by a *LimitError: a decoded reading's key,
// event time or value is outside the Limits its connector checks, so the
// connector dead-letters it.
var ErrOutOfLimits = errors.New("reading out of limits")

// OperatorLoadError is returned when an operator cannot read a state blob.
type OperatorLoadError struct {
	Node     string // graph node name, when known
	Operator string // operator type name
	Reason   string
	Err      error
}

func (e *OperatorLoadError) Error() string {
	var b strings.Builder
	b.WriteString("load state of operator ")
	b.WriteString(strconv.Quote(e.Operator))
	if e.Node != "" {
		b.WriteString(" (node ")
		b.WriteString(strconv.Quote(e.Node))
		b.WriteString(")")
	}
	b.WriteString(": ")
	b.WriteString(e.Reason)
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

func (e *OperatorLoadError) Unwrap() error { return e.Err }

// VersionError is returned when a saved state blob has a type version the
// operator neither is nor can migrate from.
type VersionError struct {
	Node     string
	Operator string
	Saved    uint32
	Accepted []uint32 // the current version first, then MigratesFrom
}

func (e *VersionError) Error() string {
	acc := make([]string, len(e.Accepted))
	for i, v := range e.Accepted {
		acc[i] = strconv.FormatUint(uint64(v), 10)
	}
	return fmt.Sprintf("load state of operator %q (node %q): saved at type version %d, operator accepts %s",
		e.Operator, e.Node, e.Saved, strings.Join(acc, ", "))
}

// GraphError is returned by Builder.Build; it names the node at fault.
type GraphError struct {
	Node   string
	Reason string
}

func (e *GraphError) Error() string {
	if e.Node == "" {
		return "graph: " + e.Reason
	}
	return fmt.Sprintf("graph: node %q: %s", e.Node, e.Reason)
}

// ErrFenced is wrapped by errors for durable writes refused because the
// writer's epoch is older than the one already recorded: the writer no
// longer owns the shard.
var ErrFenced = errors.New("fenced: writer epoch is older than the owner's")

// ErrConflict is wrapped by a conditional write that lost a race for a
// manifest (a checkpoint manifest, or the S3 store's own): another writer
// changed it since this one read it, so the write was refused and changed
// nothing; a retry reads the winner's. It does not wrap ErrFenced: losing
// a race does not make a writer the stale one. A Checkpointer that loses
// the race for its manifest rereads it, and is fenced (a NotOwnerError)
// when the winner's epoch is newer. ConditionalSaver.SaveIfUnchanged
// returns it, and the S3 store's commits (connectors/s3 ErrConflict is
// this error).
var ErrConflict = errors.New("manifest changed by another writer")

// ErrSchemaMismatch is wrapped by a *SchemaMismatchError: a snapshot was
// taken by a graph whose archive schema differs from the running one's.
var ErrSchemaMismatch = errors.New("snapshot schema fingerprint mismatch")

// SchemaMismatchError is returned by Checkpointer.Restore for a snapshot
// whose recorded archive schema fingerprint is not the running graph's.
type SchemaMismatchError struct {
	Snapshot   string // the snapshot's manifest key
	Checkpoint CheckpointID
	Stored     string // fingerprint recorded in the snapshot
	Running    string // fingerprint of the running graph
}

func (e *SchemaMismatchError) Error() string {
	return fmt.Sprintf("snapshot %s (checkpoint %d): schema fingerprint %s does not match the running graph's %s", e.Snapshot, uint64(e.Checkpoint), e.Stored, e.Running)
}

func (e *SchemaMismatchError) Unwrap() error { return ErrSchemaMismatch }

// ErrSinkClosed is returned by a Sink's Write after Close.
var ErrSinkClosed = errors.New("sink closed")

// ErrSinkFailed is wrapped by a Sink's error when the sink failed for
// good: its server refuses its configuration (credentials, a bucket that
// does not exist, a certificate that does not verify), so every later
// Write and Flush fails the same way until the configuration changes. A
// caller does not retry such an error (the backfill fails with it).
var ErrSinkFailed = errors.New("sink failed for good")
