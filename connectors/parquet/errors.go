package parquet

import (
	"errors"
	"fmt"
)

// ErrNotFound is wrapped by Archive.Open for a name that holds no object.
var ErrNotFound = errors.New("archive object not found")

// ErrUploadNotFound is wrapped by Uploader calls on an upload that was
// completed or aborted.
var ErrUploadNotFound = errors.New("upload not found")

// ErrSchemaMismatch is wrapped by a *FingerprintError: an archive file was
// written with another schema than the reader expects.
var ErrSchemaMismatch = errors.New("archive schema fingerprint mismatch")

// ErrRowOrder is wrapped by RollingWriter.Append for rows it refuses:
// out of source order, or at or before the last cut. The rows were not
// taken.
var ErrRowOrder = errors.New("archive rows out of order")

// ErrRowTooLarge is wrapped by the writers for a row whose sensor id or
// signal name is longer than a page the reader accepts holds
// (MaxStringBytes): written, it would make the whole file unreadable. The
// rows were not taken.
var ErrRowTooLarge = errors.New("archive row too large")

// ErrBadName is wrapped by ParseFileName and by archives refusing a name
// that is not a clean relative path or that names a temp file
// (CheckObjectName).
var ErrBadName = errors.New("bad archive file name")

// FingerprintError is returned by the reader for a file whose stored schema
// fingerprint is not the expected one. It names the file and both
// fingerprints; errors.Is(err, ErrSchemaMismatch) holds.
type FingerprintError struct {
	File     string // archive object name
	Got      string // fingerprint stored in the file ("" when absent)
	Expected string
}

func (e *FingerprintError) Error() string {
	got := e.Got
	if got == "" {
		got = "(none)"
	}
	return fmt.Sprintf("archive file %s: schema fingerprint %s does not match expected %s", e.File, got, e.Expected)
}

func (e *FingerprintError) Unwrap() error { return ErrSchemaMismatch }
