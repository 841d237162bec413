package parquet

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// The local folder's uploads are files written in place: CreateUpload
// creates an empty file at the upload's (hidden) name, UploadPart writes
// at the part's offset and fsyncs, CompleteUpload truncates the file to
// the parts' end. There is one upload per name, so the id is fixed.
const localUploadID = "file"

var (
	_ Uploader = (*LocalArchive)(nil)
	_ Mover    = (*LocalArchive)(nil)
	_ Deleter  = (*LocalArchive)(nil)
)

func (a *LocalArchive) path(name string) string {
	return filepath.Join(a.root, filepath.FromSlash(name))
}

// CreateUpload implements Uploader: an empty file at name.
func (a *LocalArchive) CreateUpload(ctx context.Context, name string) (string, error) {
	if err := CheckObjectName(a.what(), "create upload", name); err != nil {
		return "", err
	}
	if err := a.ctxErr(ctx, "create upload", name); err != nil {
		return "", err
	}
	p := a.path(name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return "", fmt.Errorf("local archive %s: create upload %s: %w", a.root, name, err)
	}
	f, err := os.OpenFile(p, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return "", fmt.Errorf("local archive %s: create upload %s: %w", a.root, name, err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("local archive %s: create upload %s: %w", a.root, name, err)
	}
	syncDir(filepath.Dir(p))
	return localUploadID, nil
}

// openUpload opens the file of an upload in progress for writing; it is
// never created here, so a writer that lost its upload (completed and
// moved, or aborted) gets ErrUploadNotFound instead of a stray file.
func (a *LocalArchive) openUpload(name, op string) (*os.File, error) {
	f, err := os.OpenFile(a.path(name), os.O_RDWR, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("local archive %s: %s %s: %w", a.root, op, name, ErrUploadNotFound)
		}
		return nil, fmt.Errorf("local archive %s: %s %s: %w", a.root, op, name, err)
	}
	return f, nil
}

// UploadPart implements Uploader: data written at off and fsynced.
func (a *LocalArchive) UploadPart(ctx context.Context, name, uploadID string, n int, off int64, data []byte) (Part, error) {
	op := "upload part " + strconv.Itoa(n) + " of"
	if err := CheckObjectName(a.what(), op, name); err != nil {
		return Part{}, err
	}
	if err := a.ctxErr(ctx, op, name); err != nil {
		return Part{}, err
	}
	f, err := a.openUpload(name, op)
	if err != nil {
		return Part{}, err
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		return Part{}, fmt.Errorf("local archive %s: upload part %d of %s: %w", a.root, n, name, err)
	}
	if err := f.Sync(); err != nil {
		return Part{}, fmt.Errorf("local archive %s: upload part %d of %s: fsync: %w", a.root, n, name, err)
	}
	return Part{Number: n, Offset: off, Size: int64(len(data)), ETag: strconv.FormatUint(uint64(crc32.Checksum(data, castagnoli)), 16)}, nil
}

// CompleteUpload implements Uploader: the file is cut at the parts' end
// and fsynced.
func (a *LocalArchive) CompleteUpload(ctx context.Context, name, uploadID string, parts []Part) error {
	if err := CheckObjectName(a.what(), "complete", name); err != nil {
		return err
	}
	if err := a.ctxErr(ctx, "complete", name); err != nil {
		return err
	}
	end, err := partsEnd(parts)
	if err != nil {
		return fmt.Errorf("local archive %s: complete %s: %w", a.root, name, err)
	}
	f, err := a.openUpload(name, "complete")
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return fmt.Errorf("local archive %s: complete %s: %w", a.root, name, err)
	}
	if st.Size() < end {
		return fmt.Errorf("local archive %s: complete %s: %d bytes written, parts end at %d", a.root, name, st.Size(), end)
	}
	if err := f.Truncate(end); err != nil {
		return fmt.Errorf("local archive %s: complete %s: %w", a.root, name, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("local archive %s: complete %s: fsync: %w", a.root, name, err)
	}
	return nil
}

// partsEnd checks that parts are numbered from 1 and contiguous from byte
// 0, and returns where the last ends.
func partsEnd(parts []Part) (int64, error) {
	var end int64
	for i, p := range parts {
		if p.Number != i+1 || p.Offset != end || p.Size < 0 {
			return 0, fmt.Errorf("part %d (number %d at %d, %d bytes) does not follow byte %d", i, p.Number, p.Offset, p.Size, end)
		}
		end += p.Size
	}
	return end, nil
}

// AbortUpload implements Uploader: the file is removed. Its errors name
// its own operation ("abort upload"), as the other archives' do.
func (a *LocalArchive) AbortUpload(ctx context.Context, name, uploadID string) error {
	if err := CheckObjectName(a.what(), "abort upload", name); err != nil {
		return err
	}
	if err := a.ctxErr(ctx, "abort upload", name); err != nil {
		return err
	}
	p := a.path(name)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("local archive %s: abort upload %s: %w", a.root, name, err)
	}
	syncDir(filepath.Dir(p))
	return nil
}

// MinPartSize implements Uploader: a file takes parts of any size.
func (a *LocalArchive) MinPartSize() int64 { return 1 }

// mergesParts: a part is written at its offset of the one file, so a
// record keeps the parts so far as one (appendPart).
func (a *LocalArchive) mergesParts() {}

// Move implements Mover with a rename (and fsyncs of both folders).
func (a *LocalArchive) Move(ctx context.Context, from, to string) error {
	if err := CheckObjectName(a.what(), "move", from); err != nil {
		return err
	}
	if err := CheckObjectName(a.what(), "move", to); err != nil {
		return err
	}
	if err := a.ctxErr(ctx, "move", from+" to "+to); err != nil {
		return err
	}
	src, dst := a.path(from), a.path(to)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("local archive %s: move %s to %s: %w", a.root, from, to, err)
	}
	if err := os.Rename(src, dst); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			if _, serr := os.Stat(dst); serr == nil {
				return nil // moved already
			}
			return fmt.Errorf("local archive %s: move %s to %s: neither exists: %w", a.root, from, to, ErrNotFound)
		}
		return fmt.Errorf("local archive %s: move %s to %s: %w", a.root, from, to, err)
	}
	syncDir(filepath.Dir(dst))
	syncDir(filepath.Dir(src))
	return nil
}

// Delete implements Deleter.
// Every name is checked before any is removed.
func (a *LocalArchive) Delete(ctx context.Context, names ...string) error {
	for _, name := range names {
		if err := CheckObjectName(a.what(), "delete", name); err != nil {
			return err
		}
	}
	var errs []error
	dirs := map[string]bool{}
	for _, name := range names {
		if err := a.ctxErr(ctx, "delete", name); err != nil {
			return err
		}
		p := a.path(name)
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("local archive %s: delete %s: %w", a.root, name, err))
		}
		dirs[filepath.Dir(p)] = true
	}
	for d := range dirs {
		syncDir(d)
	}
	return errors.Join(errs...)
}

// syncDir fsyncs a folder, best effort (not every file system syncs
// folders).
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
