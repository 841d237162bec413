package parquet

import (
	"context"
	"io"
	"time"
)

// Archive is the object store an archive lives in: a local folder
// ([LocalArchive]), an S3 prefix (connectors/s3), or memory for tests
// ([MemArchive]). Names are slash-separated relative paths such as
// "iot/shard-000003/00000000000000000100-00000000000000000199-e00000000000000000007.parquet";
// they never start with a slash and never contain "." or ".." elements.
//
// Implementations are safe for concurrent use. ctx bounds each call
// (for Open, only the open itself: reads through the returned Object are
// bounded by the Object's own lifetime, see Object).
type Archive interface {
	// List returns the objects whose names start with prefix, sorted by
	// name (byte-wise ascending). An empty result is not an error.
	// Temporary files of an unfinished PutAtomic are never listed.
	List(ctx context.Context, prefix string) ([]ObjectInfo, error)
	// Open returns a random-access reader of the named object, or an
	// error wrapping ErrNotFound. The caller closes it.
	Open(ctx context.Context, name string) (Object, error)
	// PutAtomic stores data under name, replacing any object already
	// there, so that readers see either the old object or the whole new
	// one, never a prefix: temp file + rename on a file system, a single
	// PUT on an object store. data is not retained after the call.
	PutAtomic(ctx context.Context, name string, data []byte) error
}

// ObjectInfo describes one listed object.
type ObjectInfo struct {
	Name string
	Size int64
	// ModTime is when the object was last written (zero when the
	// store does not say).
	ModTime time.Time
}

// Object is an open archive object: random access plus its size, which is
// what a Parquet reader needs (footer first, then one row group at a
// time). ReadAt may be called concurrently. Close releases it; reads
// after Close fail.
type Object interface {
	io.ReaderAt
	io.Closer
	// Size is the object's length in bytes.
	Size() int64
}
