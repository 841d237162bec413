package parquet

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

var (
	_ Uploader     = (*MemArchive)(nil)
	_ UploadLister = (*MemArchive)(nil)
	_ Mover        = (*MemArchive)(nil)
	_ Deleter      = (*MemArchive)(nil)
	_ PageLister   = (*MemArchive)(nil)
)

// CreateUpload implements Uploader.
func (m *MemArchive) CreateUpload(ctx context.Context, name string) (string, error) {
	if err := CheckObjectName(memWhat, "create upload", name); err != nil {
		return "", err
	}
	if err := memCtxErr(ctx, "create upload", name); err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.nextID++
	id := "u" + strconv.Itoa(m.nextID)
	m.uploads[id] = &memUpload{name: name, parts: map[int][]byte{}}
	return id, nil
}

func (m *MemArchive) upload(name, id, op string) (*memUpload, error) {
	u := m.uploads[id]
	if u == nil || u.name != name {
		return nil, fmt.Errorf("memory archive: %s %s (upload %s): %w", op, name, id, ErrUploadNotFound)
	}
	return u, nil
}

// UploadPart implements Uploader.
func (m *MemArchive) UploadPart(ctx context.Context, name, uploadID string, n int, off int64, data []byte) (Part, error) {
	op := "upload part " + strconv.Itoa(n) + " of"
	if err := CheckObjectName(memWhat, op, name); err != nil {
		return Part{}, err
	}
	if err := memCtxErr(ctx, op, name); err != nil {
		return Part{}, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	u, err := m.upload(name, uploadID, op)
	if err != nil {
		return Part{}, err
	}
	u.parts[n] = slices.Clone(data)
	return Part{Number: n, Offset: off, Size: int64(len(data)), ETag: fmt.Sprintf("%s-%d-%d", uploadID, n, len(data))}, nil
}

// CompleteUpload implements Uploader.
func (m *MemArchive) CompleteUpload(ctx context.Context, name, uploadID string, parts []Part) error {
	if err := CheckObjectName(memWhat, "complete", name); err != nil {
		return err
	}
	if err := memCtxErr(ctx, "complete", name); err != nil {
		return err
	}
	if _, err := partsEnd(parts); err != nil {
		return fmt.Errorf("memory archive: complete %s: %w", name, err)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	u, err := m.upload(name, uploadID, "complete")
	if err != nil {
		return err
	}
	var data []byte
	for _, p := range parts {
		b, ok := u.parts[p.Number]
		if !ok || int64(len(b)) != p.Size {
			return fmt.Errorf("memory archive: complete %s: part %d is not the one uploaded", name, p.Number)
		}
		data = append(data, b...)
	}
	m.objs[name] = memObj{data: data, mod: m.Now()}
	delete(m.uploads, uploadID)
	return nil
}

// AbortUpload implements Uploader.
func (m *MemArchive) AbortUpload(ctx context.Context, name, uploadID string) error {
	if err := CheckObjectName(memWhat, "abort upload", name); err != nil {
		return err
	}
	if err := memCtxErr(ctx, "abort upload", name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if u := m.uploads[uploadID]; u != nil && u.name == name {
		delete(m.uploads, uploadID)
	}
	return nil
}

// MinPartSize implements Uploader.
func (m *MemArchive) MinPartSize() int64 { return 1 }

// ListUploads implements UploadLister.
func (m *MemArchive) ListUploads(ctx context.Context, prefix string) ([]Upload, error) {
	if err := memCtxErr(ctx, "list uploads", strconv.Quote(prefix)); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []Upload
	for id, u := range m.uploads {
		if strings.HasPrefix(u.name, prefix) {
			out = append(out, Upload{Name: u.name, ID: id})
		}
	}
	slices.SortFunc(out, func(a, b Upload) int { return strings.Compare(a.Name+a.ID, b.Name+b.ID) })
	return out, nil
}

// Uploads returns how many uploads are in progress (for tests).
func (m *MemArchive) Uploads() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.uploads)
}

// Move implements Mover.
func (m *MemArchive) Move(ctx context.Context, from, to string) error {
	if err := CheckObjectName(memWhat, "move", from); err != nil {
		return err
	}
	if err := CheckObjectName(memWhat, "move", to); err != nil {
		return err
	}
	if err := memCtxErr(ctx, "move", from+" to "+to); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	o, ok := m.objs[from]
	if !ok {
		if _, done := m.objs[to]; done {
			return nil
		}
		return fmt.Errorf("memory archive: move %s to %s: neither exists: %w", from, to, ErrNotFound)
	}
	m.objs[to] = o
	delete(m.objs, from)
	return nil
}

// Delete implements Deleter.
func (m *MemArchive) Delete(ctx context.Context, names ...string) error {
	for _, n := range names {
		if err := CheckObjectName(memWhat, "delete", n); err != nil {
			return err
		}
	}
	if err := memCtxErr(ctx, "delete", strings.Join(names, ", ")); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range names {
		delete(m.objs, n)
	}
	return nil
}

// ListPage implements PageLister.
func (m *MemArchive) ListPage(ctx context.Context, prefix, startAfter string, limit int) ([]ObjectInfo, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("memory archive: %w", err) // ListAfter says what was listed
	}
	return pageAfter(m.list(prefix), startAfter, limit), nil
}
