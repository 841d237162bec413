package parquet

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// tempPrefix starts the base name of a file PutAtomic is still writing.
// List skips such files, so a crash mid-write leaves litter but never a
// half file in the archive's listing; a PutAtomic into a folder deletes
// the stale ones there, at most once per staleTempAge (see sweepTemps),
// and SweepTemps those of every folder.
const tempPrefix = ".tmp-"

// staleTempAge is how long ago a temp file must have been last written
// for a sweep to take it for a crashed writer's and delete it. A
// PutAtomic writes its temp file in one write, fsync and rename, so a
// live writer's is seconds old, even one of another process sharing the
// folder; deleting one all the same (a write stalled for longer) only
// fails that writer's rename, which it retries: it never publishes a
// half file.
const staleTempAge = time.Hour

// LocalArchive is an Archive in a local folder: object names are paths
// under the root. PutAtomic writes a temp file in the destination folder,
// fsyncs it, renames it over the name and fsyncs the folder.
type LocalArchive struct {
	root  string
	swept sync.Map         // folder → time.Time of its last sweep (sweepTemps)
	now   func() time.Time // the sweep's clock; tests set it
}

var (
	_ Archive    = (*LocalArchive)(nil)
	_ PageLister = (*LocalArchive)(nil)
)

// NewLocalArchive returns an archive rooted at dir, creating the folder.
func NewLocalArchive(dir string) (*LocalArchive, error) {
	if dir == "" {
		return nil, errors.New("local archive: empty folder name")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("local archive %s: %w", dir, err)
	}
	return &LocalArchive{root: dir, now: time.Now}, nil
}

// Root returns the archive's folder.
func (a *LocalArchive) Root() string { return a.root }

// CheckObjectName refuses an object name that is not a clean relative
// path, that is the root itself ("", ".", which a local Delete would
// remove) or that names a temp file (IsTempName): the rules every
// archive shares, so that their errors read the same and an archive's
// objects keep their meaning in any other (an S3 archive synced to a
// folder). The error names the archive (what: "local archive /dir",
// "s3 archive s3://bucket/prefix/"), the operation and the name, and
// wraps ErrBadName.
func CheckObjectName(what, op, name string) error {
	if name == "" || name == "." || !fs.ValidPath(name) {
		return fmt.Errorf("%s: %s: %w: %q is not a clean relative path", what, op, ErrBadName, name)
	}
	if IsTempName(name) {
		return fmt.Errorf("%s: %s: %w: %q names a temp file (%s*), which List hides", what, op, ErrBadName, name, tempPrefix)
	}
	return nil
}

// IsTempName reports whether name's last element starts with the prefix
// of a local archive's temp files (tempPrefix): a name no archive takes
// (CheckObjectName) and every archive's List hides, since in a folder it
// is a half-written file that a sweep deletes.
func IsTempName(name string) bool { return strings.HasPrefix(path.Base(name), tempPrefix) }

// what names the archive in its errors.
func (a *LocalArchive) what() string { return "local archive " + a.root }

// ctxErr is ctx's error, if it ended, naming the archive, the operation
// and its object(s) (what), and wrapping ctx.Err().
func (a *LocalArchive) ctxErr(ctx context.Context, op, what string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("local archive %s: %s %s: %w", a.root, op, what, err)
	}
	return nil
}

// List implements Archive.
func (a *LocalArchive) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	var out []ObjectInfo
	// WalkDir does not follow a root that is a symlink (an archive folder
	// linked to the disk it lives on): it would list nothing. Walk the
	// folder the link points to.
	root := a.root
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == root && errors.Is(err, fs.ErrNotExist) {
				return fs.SkipAll
			}
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(rel)
		if d.IsDir() {
			// Prune folders that cannot hold a match.
			if name != "." && !strings.HasPrefix(name+"/", prefix) && !strings.HasPrefix(prefix, name+"/") {
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || strings.HasPrefix(d.Name(), tempPrefix) || !strings.HasPrefix(name, prefix) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		out = append(out, ObjectInfo{Name: name, Size: info.Size(), ModTime: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("local archive %s: list %q: %w", a.root, prefix, err)
	}
	slices.SortFunc(out, func(x, y ObjectInfo) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// ListPage implements PageLister. It reads only the folders that can
// hold a name under prefix after startAfter, in name order, and stops at
// limit names: without it every page (ListAfter, one per partition for
// ListPartitions) walked and stat'ed the whole tree (List).
func (a *LocalArchive) ListPage(ctx context.Context, prefix, startAfter string, limit int) ([]ObjectInfo, error) {
	var out []ObjectInfo
	if limit <= 0 {
		return out, nil
	}
	root := a.root // a symlinked root, as in List
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	type entry struct {
		key string // the name, with a trailing "/" for a folder
		d   fs.DirEntry
	}
	var walk func(dir, rel string) error
	walk = func(dir, rel string) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		des, err := os.ReadDir(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // no archive yet, or a folder removed since it was read
		}
		if err != nil {
			return err
		}
		// Sorted by key, not by element ("iot-eu/x" sorts before
		// "iot/x", as '-' before '/'), so names come in byte order.
		ents := make([]entry, 0, len(des))
		for _, d := range des {
			k := rel + d.Name()
			if d.IsDir() {
				k += "/"
			}
			ents = append(ents, entry{k, d})
		}
		slices.SortFunc(ents, func(x, y entry) int { return strings.Compare(x.key, y.key) })
		for _, e := range ents {
			if len(out) >= limit {
				return nil
			}
			if e.d.IsDir() {
				// Prune folders that cannot hold a match: off prefix, or
				// every name in them sorts at or before startAfter.
				if (!strings.HasPrefix(e.key, prefix) && !strings.HasPrefix(prefix, e.key)) ||
					(e.key <= startAfter && !strings.HasPrefix(startAfter, e.key)) {
					continue
				}
				if err := walk(filepath.Join(dir, e.d.Name()), e.key); err != nil {
					return err
				}
				continue
			}
			if !e.d.Type().IsRegular() || strings.HasPrefix(e.d.Name(), tempPrefix) || !strings.HasPrefix(e.key, prefix) || e.key <= startAfter {
				continue
			}
			info, err := e.d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // removed since the folder was read
			}
			if err != nil {
				return err
			}
			out = append(out, ObjectInfo{Name: e.key, Size: info.Size(), ModTime: info.ModTime()})
		}
		return nil
	}
	if err := walk(root, ""); err != nil {
		return nil, fmt.Errorf("local archive %s: %w", a.root, err) // ListAfter says what was listed
	}
	return out, nil
}

// Open implements Archive.
func (a *LocalArchive) Open(ctx context.Context, name string) (Object, error) {
	if err := CheckObjectName(a.what(), "open", name); err != nil {
		return nil, err
	}
	if err := a.ctxErr(ctx, "open", name); err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(a.root, filepath.FromSlash(name)))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("local archive %s: open %s: %w", a.root, name, ErrNotFound)
		}
		return nil, fmt.Errorf("local archive %s: open %s: %w", a.root, name, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("local archive %s: stat %s: %w", a.root, name, err)
	}
	return &fileObject{File: f, size: st.Size()}, nil
}

type fileObject struct {
	*os.File
	size int64
}

func (o *fileObject) Size() int64 { return o.size }

// PutAtomic implements Archive.
func (a *LocalArchive) PutAtomic(ctx context.Context, name string, data []byte) (err error) {
	if err := CheckObjectName(a.what(), "put", name); err != nil {
		return err
	}
	if err := a.ctxErr(ctx, "put", name); err != nil {
		return err
	}
	dst := filepath.Join(a.root, filepath.FromSlash(name))
	dir := filepath.Dir(dst)
	wrap := func(step string, err error) error {
		return fmt.Errorf("local archive %s: put %s: %s: %w", a.root, name, step, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return wrap("create folder", err)
	}
	a.sweepTemps(dir)
	tmp, err := os.CreateTemp(dir, tempPrefix+path.Base(name)+"-*")
	if err != nil {
		return wrap("create temp file", err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(data); err != nil {
		return wrap("write", err)
	}
	if err := tmp.Sync(); err != nil {
		return wrap("fsync", err)
	}
	if err := tmp.Close(); err != nil {
		return wrap("close", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return wrap("rename", err)
	}
	syncDir(dir)
	return nil
}

// sweepTemps deletes the temp files of PutAtomic in dir last written over
// staleTempAge ago: those a crash left. It sweeps a folder again once its
// last sweep is staleTempAge old, so a temp file too young at the first
// (a worker restarted within the hour of its crash) goes at a later one
// instead of staying while the process lives. Best effort: a file it
// cannot delete is left for the next sweep.
func (a *LocalArchive) sweepTemps(dir string) {
	now := a.now()
	if last, ok := a.swept.Load(dir); ok && now.Sub(last.(time.Time)) < staleTempAge {
		return
	}
	a.swept.Store(dir, now)
	des, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	cutoff := now.Add(-staleTempAge)
	for _, d := range des {
		if !d.Type().IsRegular() || !strings.HasPrefix(d.Name(), tempPrefix) {
			continue
		}
		if info, err := d.Info(); err == nil && info.ModTime().Before(cutoff) {
			_ = os.Remove(filepath.Join(dir, d.Name()))
		}
	}
}

// TempSweepBudget bounds LocalArchive.SweepTemps: on a tree too large
// to walk in it, the rest waits for the next sweep (or a PutAtomic into
// the folder).
const TempSweepBudget = 10 * time.Second

// tempSweepBudget is TempSweepBudget; tests shorten it.
var tempSweepBudget = TempSweepBudget

// SweepTemps deletes the temp files of PutAtomic last written over
// staleTempAge ago in every folder of the archive, and returns how many
// it deleted. PutAtomic sweeps only the folder it writes into, so those
// a crash left in a folder nothing writes into again (the staging folder
// of a shard that moved to another worker for good) stayed for ever: the
// archive sink runs SweepTemps in the background as it opens
// (pipeline.ArchiveSink), and Compact as it starts. It stops after
// TempSweepBudget with an error saying so, the files deleted until then
// counted. Best effort otherwise: a folder it cannot read or a file it
// cannot delete is left for the next sweep.
func (a *LocalArchive) SweepTemps(ctx context.Context) (int, error) {
	root := a.root // a symlinked root, as in List
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	start := time.Now()
	cutoff := a.now().Add(-staleTempAge)
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if d != nil && d.IsDir() && p != root {
				return fs.SkipDir
			}
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if time.Since(start) > tempSweepBudget {
			return fmt.Errorf("stopped after %s, the rest left for the next sweep", tempSweepBudget)
		}
		if !d.Type().IsRegular() || !strings.HasPrefix(d.Name(), tempPrefix) {
			return nil
		}
		if info, err := d.Info(); err == nil && info.ModTime().Before(cutoff) && os.Remove(p) == nil {
			n++
		}
		return nil
	})
	if err != nil {
		return n, fmt.Errorf("local archive %s: sweep of stale temp files: %w", a.root, err)
	}
	return n, nil
}

// MemArchive is an in-memory Archive for tests and examples. Not for
// production: nothing survives the process.
type MemArchive struct {
	mu      sync.Mutex
	objs    map[string]memObj
	uploads map[string]*memUpload
	nextID  int
	puts    int
	// Now is the clock of ModTime (default time.Now); tests set it.
	Now func() time.Time
}

type memObj struct {
	data []byte
	mod  time.Time
}

type memUpload struct {
	name  string
	parts map[int][]byte
}

var _ Archive = (*MemArchive)(nil)

// NewMemArchive returns an empty in-memory archive.
func NewMemArchive() *MemArchive {
	return &MemArchive{objs: map[string]memObj{}, uploads: map[string]*memUpload{}, Now: time.Now}
}

// Puts returns how many PutAtomic calls succeeded.
func (m *MemArchive) Puts() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.puts
}

// memCtxErr is ctx's error, if it ended, naming the memory archive, the
// operation and its object(s) (what), and wrapping ctx.Err().
func memCtxErr(ctx context.Context, op, what string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %s %s: %w", memWhat, op, what, err)
	}
	return nil
}

// memWhat names the memory archive in its errors.
const memWhat = "memory archive"

// List implements Archive.
func (m *MemArchive) List(ctx context.Context, prefix string) ([]ObjectInfo, error) {
	if err := memCtxErr(ctx, "list", strconv.Quote(prefix)); err != nil {
		return nil, err
	}
	return m.list(prefix), nil
}

// list returns the objects under prefix, sorted by name.
func (m *MemArchive) list(prefix string) []ObjectInfo {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []ObjectInfo
	for name, o := range m.objs {
		if strings.HasPrefix(name, prefix) {
			out = append(out, ObjectInfo{Name: name, Size: int64(len(o.data)), ModTime: o.mod})
		}
	}
	slices.SortFunc(out, func(x, y ObjectInfo) int { return strings.Compare(x.Name, y.Name) })
	return out
}

// Open implements Archive.
func (m *MemArchive) Open(ctx context.Context, name string) (Object, error) {
	if err := CheckObjectName(memWhat, "open", name); err != nil {
		return nil, err
	}
	if err := memCtxErr(ctx, "open", name); err != nil {
		return nil, err
	}
	m.mu.Lock()
	o, ok := m.objs[name]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("memory archive: open %s: %w", name, ErrNotFound)
	}
	return &memObject{Reader: strings.NewReader(string(o.data))}, nil
}

type memObject struct{ *strings.Reader }

func (o *memObject) Close() error { return nil }

// PutAtomic implements Archive.
func (m *MemArchive) PutAtomic(ctx context.Context, name string, data []byte) error {
	if err := CheckObjectName(memWhat, "put", name); err != nil {
		return err
	}
	if err := memCtxErr(ctx, "put", name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[name] = memObj{data: slices.Clone(data), mod: m.Now()}
	m.puts++
	return nil
}
