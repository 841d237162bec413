package files

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tflo-io/tflo/streaming"
)

// Store is a StateStore and CursorStore in one folder. Create it with
// Open; Close stops its I/O goroutines.
type Store struct {
	dir  string
	cfg  config
	lock *os.File

	jobs      chan func()
	closing   chan struct{}
	closeOnce sync.Once
	workers   sync.WaitGroup

	tmpSeq     atomic.Uint64  // names temporary files
	background sync.WaitGroup // cleanups of abandoned batches; waited by Close

	curMu sync.Mutex // serialises SaveCursor's read-compare-write
	casMu sync.Mutex // serialises SaveIfUnchanged's read-compare-writes

	order writeOrder // snapshot files replaced in call order
}

// syncfsMinBatch is the smallest SaveBatch written with one syncfs instead
// of one fsync per file.
const syncfsMinBatch = 64

var (
	_ streaming.StateStore       = (*Store)(nil)
	_ streaming.CursorStore      = (*Store)(nil)
	_ streaming.ConditionalSaver = (*Store)(nil)
)

// Open opens (creating it and its missing parents if needed, each made
// durable in its parent) the store folder dir, takes its lock, removes
// temporary files a crash left behind and starts the I/O goroutines.
func Open(dir string, opts ...Option) (*Store, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	created := missingFolders(dir)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("files state store: create folder %q: %w", dir, err)
	}
	// A new folder's entry is durable only once its parent is fsynced:
	// without it a crash can lose a new shard folder, and with it every
	// file a call reported durable in it.
	if cfg.sync {
		for _, d := range created {
			if err := fsyncFolder(filepath.Dir(d)); err != nil {
				return nil, fmt.Errorf("files state store: create folder %q: %w", dir, err)
			}
		}
	}
	lock, err := lockFolder(filepath.Join(dir, "LOCK"))
	if err != nil {
		return nil, fmt.Errorf("files state store %q: %w", dir, err)
	}
	s := &Store{dir: dir, cfg: cfg, lock: lock, jobs: make(chan func()), closing: make(chan struct{}), order: newWriteOrder()}
	entries, err := os.ReadDir(dir)
	if err != nil {
		lock.Close()
		return nil, fmt.Errorf("files state store: read folder %q: %w", dir, err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
				lock.Close()
				return nil, fmt.Errorf("files state store: remove stale temporary file: %w", err)
			}
		}
	}
	for range cfg.workers {
		s.workers.Go(s.work)
	}
	return s, nil
}

func (s *Store) work() {
	for {
		select {
		case fn := <-s.jobs:
			fn()
		case <-s.closing:
			return
		}
	}
}

// Close stops the I/O goroutines after the jobs they are running and
// releases the folder's lock. Calls after Close return ErrClosed. Close is
// idempotent.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.closing)
		s.workers.Wait()
		s.background.Wait()
		err = s.lock.Close()
	})
	return err
}

// Dir returns the store's folder.
func (s *Store) Dir() string { return s.dir }

// submit hands fn to an I/O goroutine. It returns ErrClosed or ctx's error
// if fn could not be handed over, in which case fn never runs.
func (s *Store) submit(ctx context.Context, fn func()) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case <-s.closing:
		return ErrClosed
	default:
	}
	select {
	case s.jobs <- fn:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.closing:
		return ErrClosed
	}
}

// do runs fn on an I/O goroutine and waits for it or for ctx.
func (s *Store) do(ctx context.Context, fn func() error) error {
	done := make(chan error, 1)
	if err := s.submit(ctx, func() { done <- fn() }); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// writeTemp writes content to a new temporary file in the folder,
// fsyncing it if fsync is set, and returns its path.
func (s *Store) writeTemp(content []byte, fsync bool) (string, error) {
	tmp := filepath.Join(s.dir, fmt.Sprintf(".tmp-%d-%d", os.Getpid(), s.tmpSeq.Add(1)))
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, fs.FileMode(s.cfg.perm))
	if err != nil {
		return "", err
	}
	if s.cfg.perm != 0o600 {
		// The umask may have cleared bits of a wider mode.
		err = f.Chmod(fs.FileMode(s.cfg.perm))
	}
	if err == nil {
		_, err = f.Write(content)
	}
	if err == nil && fsync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// writeFile atomically replaces name with content, as the write of
// ticket (writeOrder.begin, or unordered): temporary file, fsync, rename
// (place). The caller fsyncs the folder.
func (s *Store) writeFile(name string, ticket uint64, content []byte) error {
	tmp, err := s.writeTemp(content, s.cfg.sync)
	if err != nil {
		return err
	}
	return s.place(tmp, name, ticket)
}

// place renames tmp over name unless a write called after ticket's has
// put its file there already (then tmp is removed: see writeOrder).
func (s *Store) place(tmp, name string, ticket uint64) error {
	if testHookPlace != nil {
		testHookPlace(name)
	}
	rename := func() error { return os.Rename(tmp, filepath.Join(s.dir, name)) }
	placed, err := true, error(nil)
	if ticket == unordered {
		err = rename()
	} else {
		placed, err = s.order.place(name, ticket, rename)
	}
	if err != nil || !placed {
		os.Remove(tmp)
	}
	return err
}

// unordered is the ticket of a write no writeOrder orders.
const unordered = 0

// testHookSyncFS, when set, runs before a batch's syncfs.
var testHookSyncFS func()

// testHookPlace, when set, runs before a snapshot file is put in place.
var testHookPlace func(name string)

// syncFS flushes the whole file system holding the folder (syncfs(2)).
func (s *Store) syncFS() error {
	if testHookSyncFS != nil {
		testHookSyncFS()
	}
	d, err := os.Open(s.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := syncfs(d); err != nil {
		return fmt.Errorf("syncfs of the file system holding %q: %w", s.dir, err)
	}
	return nil
}

// syncDir fsyncs the folder, making renames and removals durable.
func (s *Store) syncDir() error {
	if !s.cfg.sync {
		return nil
	}
	return fsyncFolder(s.dir)
}

// testHookFsyncFolder, when set, runs before a folder is fsynced.
var testHookFsyncFolder func(path string)

// fsyncFolder fsyncs the folder path, making the entries in it durable.
func fsyncFolder(path string) error {
	if testHookFsyncFolder != nil {
		testHookFsyncFolder(path)
	}
	d, err := os.Open(path)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync folder %q: %w", path, err)
	}
	return nil
}

// missingFolders returns dir and those of its parents that do not exist,
// the folders MkdirAll(dir) will create.
func missingFolders(dir string) []string {
	var out []string
	for d := filepath.Clean(dir); ; {
		if _, err := os.Lstat(d); !errors.Is(err, fs.ErrNotExist) {
			return out
		}
		out = append(out, d)
		parent := filepath.Dir(d)
		if parent == d {
			return out
		}
		d = parent
	}
}

// readFile reads the file for key and returns the bytes after its key
// header, or an error wrapping streaming.ErrNotFound.
func (s *Store) readFile(k kind, key []byte) ([]byte, string, error) {
	name := fileName(k, key)
	path := filepath.Join(s.dir, name)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, path, fmt.Errorf("%s key %q: %w", k, key, streaming.ErrNotFound)
	}
	if err != nil {
		return nil, path, fmt.Errorf("%s key %q: read %s: %w", k, key, path, err)
	}
	stored, rest, err := splitKeyHeader(b)
	if err != nil {
		return nil, path, fmt.Errorf("%s key %q (file %s): %w", k, key, path, err)
	}
	if !bytes.Equal(stored, key) {
		return nil, path, fmt.Errorf("%s key %q (file %s): file records key %q: %w", k, key, path, stored, streaming.ErrCorrupt)
	}
	return rest, path, nil
}

func encodeSnapshotFile(key []byte, snap streaming.Snapshot) []byte {
	b := make([]byte, 0, len(key)+14+streaming.SnapshotEncodedLen(snap))
	return streaming.AppendSnapshot(appendKeyHeader(b, key), snap)
}

// Save atomically replaces key's snapshot file.
func (s *Store) Save(ctx context.Context, key []byte, snap streaming.Snapshot) error {
	name := fileName(kindSnapshot, key)
	content := encodeSnapshotFile(key, snap)
	err := s.doWrite(ctx, name, func(ticket uint64) error {
		if err := s.writeFile(name, ticket, content); err != nil {
			return err
		}
		return s.syncDir()
	})
	if err != nil {
		return fmt.Errorf("snapshot key %q: save: %w", key, err)
	}
	return nil
}

// SaveIfUnchanged implements streaming.ConditionalSaver: each item's file
// is read, compared with what the writer read and replaced (atomically, as
// Save does) under a lock of the Store, and the folder is fsynced once at
// the end. In a process the lock makes it a compare-and-set; across
// processes the folder's lock does (the exclusive flock(2) on LOCK that
// Open takes and holds, so no other process writes the folder while this
// Store is open). That needs a file system whose flock excludes other
// processes — a local one; on NFS only where flock is mapped to
// working NFS locks — and, on a system without flock(2), where Open locks
// nothing, a caller running one process per folder.
func (s *Store) SaveIfUnchanged(ctx context.Context, items []streaming.ConditionalSave) ([]error, error) {
	refused := make([]error, len(items))
	for i, it := range items {
		name := fileName(kindSnapshot, it.Key)
		content := encodeSnapshotFile(it.Key, it.Snapshot)
		key := bytes.Clone(it.Key) // a job its caller gave up on must not read the caller's slice
		var read *streaming.Snapshot
		if it.Read != nil {
			r := *it.Read
			r.Data, r.Meta.Cursor, r.Meta.Operators = bytes.Clone(r.Data), bytes.Clone(r.Meta.Cursor), slices.Clone(r.Meta.Operators)
			r.Meta.DroppedNodes = slices.Clone(r.Meta.DroppedNodes)
			read = &r
		}
		want := streaming.ConditionalSave{Read: read}
		err := s.doWrite(ctx, name, func(ticket uint64) error {
			s.casMu.Lock()
			defer s.casMu.Unlock()
			var stored *streaming.Snapshot
			rest, path, err := s.readFile(kindSnapshot, key)
			switch {
			case errors.Is(err, streaming.ErrNotFound):
			case err != nil:
				return err
			default:
				snap, err := streaming.UnmarshalSnapshot(rest)
				if err != nil {
					return fmt.Errorf("snapshot key %q (file %s): %w", key, path, err)
				}
				stored = &snap
			}
			if !want.Unchanged(stored) {
				refused[i] = fmt.Errorf("snapshot key %q: save refused, it changed since it was read: %w", key, streaming.ErrConflict)
				return nil
			}
			return s.writeFile(name, ticket, content)
		})
		if err != nil {
			return nil, fmt.Errorf("snapshot key %q: save if unchanged: %w", it.Key, err)
		}
	}
	if err := s.do(ctx, s.syncDir); err != nil {
		return nil, fmt.Errorf("save %d snapshots if unchanged: %w", len(items), err)
	}
	return refused, nil
}

// doWrite runs write, the job of one write of file name, on an I/O
// goroutine with the write's ticket (writeOrder), and waits for it or
// for ctx.
func (s *Store) doWrite(ctx context.Context, name string, write func(ticket uint64) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	w := s.order.begin(name)
	done := make(chan error, 1)
	err := s.submit(ctx, func() {
		if !w.claim() {
			return
		}
		defer w.end()
		done <- write(w.ticket)
	})
	if err == nil {
		select {
		case err = <-done:
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	if err != nil {
		w.abandon() // unless its job runs
	}
	return err
}

// SaveBatch writes the batch's files in parallel on the I/O goroutines and
// fsyncs the folder once at the end. A key repeated in the batch ends with
// its last item. Each file is replaced atomically; the batch as a whole is
// not: on error or cancellation the files already renamed stay.
//
// A batch of at least syncfsMinBatch files on Linux is written in three
// phases — every temporary file written without fsync, one syncfs(2) that
// makes all of them durable at once, then every rename — which keeps the
// rule that no final name ever points at bytes that are not on disk while
// paying for one file-system flush instead of one fsync per file. Smaller
// batches (and other systems) fsync each temporary file before its rename.
func (s *Store) SaveBatch(ctx context.Context, items []streaming.KeyedSnapshot) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(items) == 0 {
		return nil
	}
	// Last occurrence of each key wins: skip earlier ones, so parallel
	// writes never race on one name.
	last := make(map[string]int, len(items))
	for i, it := range items {
		last[string(it.Key)] = i
	}
	type file struct {
		key     []byte
		name    string
		content []byte
		tmp     string
		w       *fileWrite
	}
	batch := make([]file, 0, len(last))
	for i, it := range items {
		if last[string(it.Key)] == i {
			name := fileName(kindSnapshot, it.Key)
			batch = append(batch, file{
				key:     append([]byte(nil), it.Key...),
				name:    name,
				content: encodeSnapshotFile(it.Key, it.Snapshot),
				w:       s.order.begin(name),
			})
		}
	}
	// Every file's write ends once: placed (or superseded), failed, or
	// abandoned before its rename ran.
	abandon := func() {
		for i := range batch {
			batch[i].w.abandon()
		}
	}
	wrap := func(err error) error { return fmt.Errorf("save batch of %d snapshots: %w", len(batch), err) }

	if !s.cfg.sync || !haveSyncfs || len(batch) < syncfsMinBatch {
		err := s.parallel(ctx, len(batch), func(i int) error {
			f := &batch[i]
			if !f.w.claim() {
				return nil
			}
			defer f.w.end()
			if err := s.writeFile(f.name, f.w.ticket, f.content); err != nil {
				return fmt.Errorf("save batch: snapshot key %q: %w", f.key, err)
			}
			return nil
		}, nil)
		if err != nil {
			abandon()
			return err
		}
		if err := s.do(ctx, s.syncDir); err != nil {
			return wrap(err)
		}
		return nil
	}

	removeTemps := func() {
		for i := range batch {
			if batch[i].tmp != "" {
				os.Remove(batch[i].tmp)
			}
		}
	}
	err := s.parallel(ctx, len(batch), func(i int) error {
		tmp, err := s.writeTemp(batch[i].content, false)
		if err != nil {
			return fmt.Errorf("save batch: snapshot key %q: %w", batch[i].key, err)
		}
		batch[i].tmp = tmp
		return nil
	}, removeTemps)
	if err != nil {
		abandon() // no rename runs
		return err
	}
	// On a failure, or once the flush ends after ctx did, nothing will
	// rename the temporary files: parallel's cleanup removes them.
	err = s.parallel(ctx, 1, func(int) error { return s.syncFS() }, removeTemps)
	if err != nil {
		abandon()
		return wrap(err)
	}
	err = s.parallel(ctx, len(batch), func(i int) error {
		f := &batch[i]
		if !f.w.claim() {
			return nil
		}
		defer f.w.end()
		tmp := f.tmp
		f.tmp = "" // placed or removed either way
		if err := s.place(tmp, f.name, f.w.ticket); err != nil {
			return fmt.Errorf("save batch: snapshot key %q: %w", f.key, err)
		}
		return nil
	}, removeTemps)
	if err != nil {
		abandon()
		return err
	}
	if err := s.do(ctx, s.syncDir); err != nil {
		return wrap(err)
	}
	return nil
}

// parallel runs fn(0..n-1) on the I/O goroutines and returns the first
// error, after which it hands over no more work. If ctx ends first it
// returns ctx's error at once; the work already handed over finishes in
// the background, and then (as after an error) cleanup runs, if not nil,
// on a goroutine the Store owns until Close.
func (s *Store) parallel(ctx context.Context, n int, fn func(i int) error, cleanup func()) error {
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
		failed   = make(chan struct{})
	)
	fail := func(err error) {
		errOnce.Do(func() { firstErr = err; close(failed) })
	}
submitting:
	for i := range n {
		select {
		case <-failed:
			break submitting
		default:
		}
		wg.Add(1)
		err := s.submit(ctx, func() {
			defer wg.Done()
			select {
			case <-failed:
				return
			default:
			}
			if err := fn(i); err != nil {
				fail(err)
			}
		})
		if err != nil {
			wg.Done()
			fail(err)
			break
		}
	}
	allDone := make(chan struct{})
	go func() { wg.Wait(); close(allDone) }()
	select {
	case <-allDone:
	case <-ctx.Done():
		if cleanup != nil {
			s.background.Go(func() { <-allDone; cleanup() })
		}
		return ctx.Err()
	}
	// Every job has finished (or never started), so firstErr is final.
	if firstErr != nil && cleanup != nil {
		cleanup()
	}
	return firstErr
}

// Load reads key's snapshot file. A missing file is an error wrapping
// streaming.ErrNotFound; a corrupt one an error wrapping
// streaming.ErrCorrupt that names the key and the file.
func (s *Store) Load(ctx context.Context, key []byte) (streaming.Snapshot, error) {
	var snap streaming.Snapshot
	key = bytes.Clone(key) // a job its caller gave up on must not read the caller's slice
	err := s.do(ctx, func() error {
		rest, path, err := s.readFile(kindSnapshot, key)
		if err != nil {
			return err
		}
		snap, err = streaming.UnmarshalSnapshot(rest)
		if err != nil {
			return fmt.Errorf("snapshot key %q (file %s): %w", key, path, err)
		}
		return nil
	})
	if err != nil {
		return streaming.Snapshot{}, err
	}
	return snap, nil
}

// ListKeys returns every stored snapshot key, decoded from file names (and
// read from the file for hashed names).
func (s *Store) ListKeys(ctx context.Context) ([][]byte, error) {
	var keys [][]byte
	err := s.do(ctx, func() error {
		entries, err := os.ReadDir(s.dir)
		if err != nil {
			return fmt.Errorf("list snapshot keys: read folder %q: %w", s.dir, err)
		}
		for _, e := range entries {
			k, key, hashed, ok, err := parseName(e.Name())
			if !ok || k != kindSnapshot {
				continue
			}
			if err != nil {
				return fmt.Errorf("list snapshot keys in %q: %w", s.dir, err)
			}
			if hashed {
				key, err = s.keyOfFile(e.Name())
				if errors.Is(err, fs.ErrNotExist) {
					continue // deleted since ReadDir
				}
				if err != nil {
					return err
				}
			}
			if fileName(k, key) != e.Name() {
				return fmt.Errorf("list snapshot keys: file %q is not the canonical name of key %q: %w", e.Name(), key, streaming.ErrCorrupt)
			}
			keys = append(keys, key)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return keys, nil
}

// keyOfFile reads the key header of a file with a hashed name.
func (s *Store) keyOfFile(name string) ([]byte, error) {
	path := filepath.Join(s.dir, name)
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// Hashed names are for keys of more than ~125 bytes; read the header
	// in growing steps rather than the whole snapshot.
	buf := make([]byte, 4096)
	for {
		n, rerr := f.ReadAt(buf, 0)
		key, _, err := splitKeyHeader(buf[:n])
		if err == nil {
			return append([]byte(nil), key...), nil
		}
		if rerr != nil || n < len(buf) {
			return nil, fmt.Errorf("file %s: %w", path, err)
		}
		buf = make([]byte, 2*len(buf))
	}
}

// Delete removes key's snapshot file; an absent key is not an error.
func (s *Store) Delete(ctx context.Context, key []byte) error {
	name := fileName(kindSnapshot, key)
	err := s.doWrite(ctx, name, func(ticket uint64) error {
		removed, err := s.remove(name, ticket)
		if err != nil || !removed {
			return err
		}
		return s.syncDir()
	})
	if err != nil {
		return fmt.Errorf("snapshot key %q: delete: %w", key, err)
	}
	return nil
}

// SaveCursor atomically replaces key's cursor file unless the stored record
// has a newer epoch (an error wrapping streaming.ErrFenced). A stored
// record that fails its checksum is refused, not overwritten.
func (s *Store) SaveCursor(ctx context.Context, key []byte, rec streaming.CursorRecord) error {
	name := fileName(kindCursor, key)
	content := append(appendKeyHeader(nil, key), streaming.MarshalCursorRecord(rec)...)
	key = append([]byte(nil), key...)
	// Not ordered by call (doWrite): the read-compare-write under curMu
	// orders cursor writes, by epoch, and a stalled one holds the lock.
	return s.do(ctx, func() error {
		s.curMu.Lock()
		defer s.curMu.Unlock()
		old, err := s.loadCursor(key)
		switch {
		case errors.Is(err, streaming.ErrNotFound):
		case err != nil:
			return err
		default:
			if err := streaming.CheckCursorFence(key, old, rec); err != nil {
				return err
			}
		}
		if err := s.writeFile(name, unordered, content); err != nil {
			return fmt.Errorf("cursor key %q: save: %w", key, err)
		}
		if err := s.syncDir(); err != nil {
			return fmt.Errorf("cursor key %q: save: %w", key, err)
		}
		return nil
	})
}

// LoadCursor returns key's cursor record, or an error wrapping
// streaming.ErrNotFound.
func (s *Store) LoadCursor(ctx context.Context, key []byte) (streaming.CursorRecord, error) {
	var rec streaming.CursorRecord
	key = bytes.Clone(key) // a job its caller gave up on must not read the caller's slice
	err := s.do(ctx, func() (err error) {
		rec, err = s.loadCursor(key)
		return err
	})
	if err != nil {
		return streaming.CursorRecord{}, err
	}
	return rec, nil
}

func (s *Store) loadCursor(key []byte) (streaming.CursorRecord, error) {
	rest, path, err := s.readFile(kindCursor, key)
	if err != nil {
		return streaming.CursorRecord{}, err
	}
	rec, err := streaming.UnmarshalCursorRecord(rest)
	if err != nil {
		return streaming.CursorRecord{}, fmt.Errorf("cursor key %q (file %s): %w", key, path, err)
	}
	return rec, nil
}

// remove deletes file name as the write of ticket (writeOrder.begin), so
// that a write called before it whose caller gave up, and which has not
// put its file in place yet, is dropped rather than bringing the file
// back. It reports whether there was a file to remove.
func (s *Store) remove(name string, ticket uint64) (bool, error) {
	removed := false
	_, err := s.order.place(name, ticket, func() error {
		err := os.Remove(filepath.Join(s.dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		removed = err == nil
		return err
	})
	return removed, err
}

// DeleteKeys removes the files of every key in parallel on the I/O
// goroutines and fsyncs the folder once; absent keys are not an error.
// (The optional batch-delete capability.)
func (s *Store) DeleteKeys(ctx context.Context, keys [][]byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(keys) == 0 {
		return nil
	}
	names := make([]string, len(keys))
	writes := make([]*fileWrite, len(keys))
	keys = slices.Clone(keys) // jobs abandoned by ctx must not read the caller's slice
	for i, k := range keys {
		names[i] = fileName(kindSnapshot, k)
		keys[i] = bytes.Clone(k)
		writes[i] = s.order.begin(names[i])
	}
	err := s.parallel(ctx, len(names), func(i int) error {
		w := writes[i]
		if !w.claim() {
			return nil
		}
		defer w.end()
		if _, err := s.remove(names[i], w.ticket); err != nil {
			return fmt.Errorf("delete batch: snapshot key %q: %w", keys[i], err)
		}
		return nil
	}, nil)
	if err != nil {
		for _, w := range writes {
			w.abandon() // unless its job runs
		}
		return err
	}
	if err := s.do(ctx, s.syncDir); err != nil {
		return fmt.Errorf("delete batch of %d snapshots: %w", len(keys), err)
	}
	return nil
}
