package parquet

import (
	"context"
	"fmt"
	"slices"
	"strings"
)

// Part is one uploaded part of an upload: its number (from 1), where it
// starts in the object, its length and the tag the store gave it.
type Part struct {
	Number int    `json:"n"`
	Offset int64  `json:"off"`
	Size   int64  `json:"size"`
	ETag   string `json:"etag,omitempty"`
}

// Uploader is the Archive capability rolling files need: an object built
// from parts that nobody sees until it is completed (an S3 multipart
// upload; on a local folder, a file written in place under a hidden
// name). Parts are uploaded in increasing number; uploading a number again
// replaces that part, so an upload resumed from an earlier record
// overwrites whatever a crashed writer uploaded after it.
//
// Methods are safe for concurrent use on different uploads. ctx bounds
// each call.
type Uploader interface {
	// CreateUpload begins an upload of name and returns its id.
	CreateUpload(ctx context.Context, name string) (uploadID string, err error)
	// UploadPart stores data as part number n of the upload, at byte
	// offset off of the object. It returns an error wrapping
	// ErrUploadNotFound when the upload was completed or aborted.
	UploadPart(ctx context.Context, name, uploadID string, n int, off int64, data []byte) (Part, error)
	// CompleteUpload makes name hold parts (contiguous, in order) as one
	// object, atomically. It returns an error wrapping ErrUploadNotFound
	// when the upload was completed or aborted already.
	CompleteUpload(ctx context.Context, name, uploadID string, parts []Part) error
	// AbortUpload discards an upload; an unknown upload is not an error.
	AbortUpload(ctx context.Context, name, uploadID string) error
	// MinPartSize is the least size of every part but the last.
	MinPartSize() int64
}

// Upload names an upload in progress.
type Upload struct {
	Name string
	ID   string
}

// UploadLister is the optional capability of listing uploads in progress,
// so a restore can abort those a crash left behind no record of (S3
// uploads are invisible to List; a local folder's are ordinary files).
type UploadLister interface {
	ListUploads(ctx context.Context, prefix string) ([]Upload, error)
}

// Mover is the Archive capability of making a finished object visible
// under its final name: a rename on a file system, a server-side copy and
// a delete on an object store. Readers see the object at `to` whole or not
// at all.
type Mover interface {
	// Move makes the object at from readable at to (replacing what is
	// there) and removes from. When from is gone but to exists, the move
	// already happened and Move returns nil; when neither exists it
	// returns an error wrapping ErrNotFound.
	Move(ctx context.Context, from, to string) error
}

// Deleter is the Archive capability of removing objects. Removing an
// absent object is not an error. A name the archive refuses (wrapping
// ErrBadName) fails the call before any object is removed.
type Deleter interface {
	Delete(ctx context.Context, names ...string) error
}

// PageLister is the optional Archive capability of listing in pages:
// the objects under prefix whose names sort after startAfter, at most
// limit of them, sorted by name. Archives without it are paged by
// ListAfter over a full List. Its error names the archive and the
// problem; ListAfter, its caller, says what was listed.
type PageLister interface {
	ListPage(ctx context.Context, prefix, startAfter string, limit int) ([]ObjectInfo, error)
}

// ListAfter returns up to limit objects under prefix whose names sort
// after startAfter ("" for the first page), using the archive's
// PageLister when it has one. Its error says what was listed (listingWhat)
// before the archive's own, which names the archive and the problem.
func ListAfter(ctx context.Context, a Archive, prefix, startAfter string, limit int) ([]ObjectInfo, error) {
	if pl, ok := a.(PageLister); ok {
		page, err := pl.ListPage(ctx, prefix, startAfter, limit)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", listingWhat(prefix, startAfter), err)
		}
		return page, nil
	}
	all, err := a.List(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", listingWhat(prefix, startAfter), err)
	}
	return pageAfter(all, startAfter, limit), nil
}

// listingWhat says in words which listing of the archive's files failed:
// under which prefix, from which name on. The archive's own error, which
// it wraps, names the archive (its folder, or its bucket and endpoint).
func listingWhat(prefix, after string) string {
	s := "list the archive's files"
	if prefix != "" {
		s += fmt.Sprintf(" under %q", prefix)
	}
	if after != "" {
		s += fmt.Sprintf(" after %q", after)
	}
	return s
}

// pageAfter returns up to limit objects of the sorted listing all whose
// names sort after startAfter.
func pageAfter(all []ObjectInfo, startAfter string, limit int) []ObjectInfo {
	i, _ := slices.BinarySearchFunc(all, startAfter, func(o ObjectInfo, s string) int {
		if o.Name <= s {
			return -1
		}
		return 1
	})
	all = all[i:]
	return all[:min(len(all), limit)]
}

// StagingDir is the hidden top-level folder of the archive's own working
// objects (in-progress files, pre-commit records). Readers skip every
// name with an element starting with '_' or '.', as Hive, Spark and
// Arrow datasets do.
const StagingDir = "_tflo"

// afterHidden follows a hidden folder's name and "/" to sort after
// everything in it: the last Unicode code point, valid UTF-8 as object
// store keys must be. ("~" did not: a name in the folder with a '~' or a
// non-ASCII letter sorts after it, and was listed again and again.)
const afterHidden = "\U0010FFFF"

// hiddenName reports whether any element of name starts with '_' or '.'.
func hiddenName(name string) bool {
	_, hidden := SkipHidden(name)
	return hidden
}

// SkipHidden reports whether name is hidden (an element of it starts
// with '_' or '.', see StagingDir) and, when it is, where a listing in
// name order goes on past it: after the first hidden folder's contents
// ("iot/_tmp/" and afterHidden), or after name itself for a hidden file
// ("iot/_SUCCESS").
func SkipHidden(name string) (after string, hidden bool) {
	for off := 0; ; {
		el, _, more := strings.Cut(name[off:], "/")
		if strings.HasPrefix(el, "_") || strings.HasPrefix(el, ".") {
			if !more {
				return name, true
			}
			return name[:off+len(el)] + "/" + afterHidden, true
		}
		if !more {
			return "", false
		}
		off += len(el) + 1
	}
}

// partMerger is an Uploader whose parts are written in place, one after
// the other, into one object (the local folder): a part and the one
// before it are one range of bytes, so the writer records them as one
// part, and a file's pre-commit record stays one part long however many
// checkpoints wrote to it. An S3 upload needs every part and its ETag.
type partMerger interface{ mergesParts() }

// appendPart returns parts with part p, just uploaded by up, after them:
// merged into the last one (in a copy) when up writes parts in place.
func appendPart(up Uploader, parts []Part, p Part) []Part {
	if _, ok := up.(partMerger); ok && len(parts) > 0 {
		out := slices.Clone(parts)
		last := &out[len(out)-1]
		last.Size += p.Size
		last.ETag = ""
		return out
	}
	return append(parts, p)
}
