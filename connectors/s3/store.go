package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tflo-io/tflo/streaming"
)

const (
	manifestName = "manifest"
	shardDir     = "shards/"
)

// Store is a streaming.StateStore on S3 that packs each batch into one
// segment object and commits it by rewriting one manifest object; see the
// package documentation for the layout, request costs and crash safety.
//
// Each shard's keys (WithShardOf; by default the keys a
// streaming.Checkpointer writes for its shard) have their own manifest
// and segments, so the workers checkpointing different shards on one
// prefix never write the same object; keys of no shard share the root
// manifest. A Store caches each manifest from its first use; Refresh
// rereads them, RefreshKey the one of a key. It is safe for concurrent use: commits of one manifest
// are serialised, everything else runs in parallel.
type Store struct {
	obj  *objects
	cfg  config
	root *group

	gmu    sync.Mutex
	groups map[string]*group // shard groups by folder
}

var (
	_ streaming.StateStore     = (*Store)(nil)
	_ streaming.ShardKeyLister = (*Store)(nil)
)

// state is one committed manifest and the ETag it was read or written with.
type state struct {
	m    *manifest
	etag string // "" = no manifest on the server yet
}

var (
	_ streaming.StateStore = (*Store)(nil)
	_ KeyDeleter           = (*Store)(nil)
	_ Scanner              = (*Store)(nil)
)

// Scanner is the optional bulk-restore capability: every live snapshot
// with one GET per segment, instead of one ranged GET per key.
type Scanner interface {
	// Scan calls fn for every live key and its snapshot, segment by
	// segment, stopping at the first error fn or a read returns. The key
	// passed to fn is only valid during the call.
	Scan(ctx context.Context, fn func(key []byte, s streaming.Snapshot) error) error
}

// KeyDeleter is the optional batch-delete capability: many keys removed in
// one commit (one manifest PUT and at most one DeleteObjects per 1000
// emptied segments).
type KeyDeleter interface {
	DeleteKeys(ctx context.Context, keys [][]byte) error
}

// New returns a Store for bucket. It builds an S3 client from the options
// (or uses WithClient) and sends no request until the first call.
func New(ctx context.Context, bucket string, opts ...Option) (*Store, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(bucket); err != nil {
		return nil, fmt.Errorf("s3 state store: %w", err)
	}
	obj, err := newObjects(ctx, bucket, &cfg)
	if err != nil {
		return nil, err
	}
	s := &Store{obj: obj, cfg: cfg, groups: map[string]*group{}}
	s.root = &group{obj: obj, cfg: &s.cfg}
	return s, nil
}

// groupFor returns the group key belongs to: its shard's (see
// WithShardOf), or the root group.
func (s *Store) groupFor(key []byte) *group {
	if s.cfg.shardOf != nil {
		if shard, ok := s.cfg.shardOf(key); ok {
			return s.group(shardFolder(shard), shard)
		}
	}
	return s.root
}

// group returns the group of folder, creating its (unloaded) handle.
func (s *Store) group(folder, shard string) *group {
	s.gmu.Lock()
	defer s.gmu.Unlock()
	g := s.groups[folder]
	if g == nil {
		g = &group{obj: s.obj.sub(folder), cfg: &s.cfg, shard: shard}
		s.groups[folder] = g
	}
	return g
}

// shardFolder is the folder of a shard's group below the prefix:
// shards/s-<path-escaped name>/, or shards/h-<hex(sha256(name))>/ for a
// name that escapes to more than 200 bytes (S3 names are limited to 1024
// bytes). Escaping makes every name one folder level, and the "s-" keeps
// "." and ".." from being path elements.
func shardFolder(shard string) string {
	if esc := url.PathEscape(shard); len(esc) <= 200 {
		return shardDir + "s-" + esc + "/"
	}
	sum := sha256.Sum256([]byte(shard))
	return shardDir + "h-" + hex.EncodeToString(sum[:]) + "/"
}

// allGroups returns the root group and the group of every shard that has
// a folder in the bucket (one LIST per 1000 shards) or a handle in this
// Store; only the root one without WithShardOf.
func (s *Store) allGroups(ctx context.Context) ([]*group, error) {
	if s.cfg.shardOf == nil {
		return []*group{s.root}, nil
	}
	folders, err := s.obj.folders(ctx, shardDir)
	if err != nil {
		return nil, fmt.Errorf("s3 state store: list shard manifests: %w", err)
	}
	for _, folder := range folders {
		if strings.Count(folder, "/") == 2 {
			s.group(folder, "")
		}
	}
	s.gmu.Lock()
	defer s.gmu.Unlock()
	out := []*group{s.root}
	for _, folder := range slices.Sorted(maps.Keys(s.groups)) {
		out = append(out, s.groups[folder])
	}
	return out, nil
}

// RefreshKey forgets the cached manifest key belongs to (its shard's, and
// the root one a shard's key is also looked up in), so that the next call
// rereads it and sees what another process committed since. A
// streaming.Checkpointer calls it for its shard's checkpoint manifest in
// Restore (a worker regaining a shard it held before would otherwise
// restore its own older checkpoint from the cache) and before each commit
// (its fence against a newer owner reads the stored manifest's epoch).
func (s *Store) RefreshKey(ctx context.Context, key []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g := s.groupFor(key)
	g.forget()
	if g != s.root {
		s.root.forget()
	}
	return nil
}

// Refresh rereads the manifests, picking up commits of another process.
func (s *Store) Refresh(ctx context.Context) error {
	s.gmu.Lock()
	gs := append([]*group{s.root}, slices.Collect(maps.Values(s.groups))...)
	s.gmu.Unlock()
	for _, g := range gs {
		g.forget()
	}
	_, err := s.root.ensure(ctx)
	return err
}

// Save stores one snapshot: a one-record segment and a manifest (2 PUTs).
// Checkpoints should use SaveBatch.
func (s *Store) Save(ctx context.Context, key []byte, snap streaming.Snapshot) error {
	return s.SaveBatch(ctx, []streaming.KeyedSnapshot{{Key: key, Snapshot: snap}})
}

// SaveBatch stores every item with one segment PUT and one manifest PUT
// per group the items belong to — one, for a checkpoint's batch, which
// holds the keys of one shard — whatever the batch size (plus the GETs of
// segments being compacted when dead bytes pass the threshold). Items of
// one group are committed together or not at all; items of several
// groups are committed group by group, in order of first appearance. When
// a key appears twice, the later item wins. An empty batch sends nothing.
func (s *Store) SaveBatch(ctx context.Context, items []streaming.KeyedSnapshot) error {
	if len(items) == 0 {
		return ctx.Err()
	}
	first := s.groupFor(items[0].Key)
	split := false
	for _, it := range items[1:] {
		if s.groupFor(it.Key) != first {
			split = true
			break
		}
	}
	if !split {
		return first.commit(ctx, items, nil, false)
	}
	var order []*group
	byGroup := map[*group][]streaming.KeyedSnapshot{}
	for _, it := range items {
		g := s.groupFor(it.Key)
		if byGroup[g] == nil {
			order = append(order, g)
		}
		byGroup[g] = append(byGroup[g], it)
	}
	for _, g := range order {
		if err := g.commit(ctx, byGroup[g], nil, false); err != nil {
			return err
		}
	}
	return nil
}

// Load returns key's snapshot with one ranged GET (plus one GET of the
// key's manifest on first use). A shard's key not in its shard's manifest
// is looked up in the root manifest too (one more GET on first use), where
// a store written before shards had manifests of their own kept it.
func (s *Store) Load(ctx context.Context, key []byte) (streaming.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return streaming.Snapshot{}, err
	}
	g := s.groupFor(key)
	snap, found, err := g.load(ctx, key)
	if err == nil && !found && g != s.root {
		snap, found, err = s.root.load(ctx, key)
	}
	if err != nil {
		return streaming.Snapshot{}, err
	}
	if !found {
		return streaming.Snapshot{}, fmt.Errorf("s3 state store %s: snapshot key %s: %w", g.obj.uri(""), streaming.QuoteKey(key), streaming.ErrNotFound)
	}
	return snap, nil
}

func decodeLoaded(uri string, key, rec []byte) (streaming.Snapshot, error) {
	k, snap, err := decodeRecord(rec)
	if err == nil && !bytes.Equal(k, key) {
		err = fmt.Errorf("record holds key %s: %w", streaming.QuoteKey(k), streaming.ErrCorrupt)
	}
	var out streaming.Snapshot
	if err == nil {
		out, err = streaming.UnmarshalSnapshot(snap)
	}
	if err != nil {
		return streaming.Snapshot{}, fmt.Errorf("s3 state store %s: snapshot key %s: %w", uri, streaming.QuoteKey(key), err)
	}
	return out, nil
}

// Scan implements Scanner: each live segment of every manifest is read
// whole (one GET, one segment in memory at a time) and its live records
// decoded in order. A restore of a 100k-key shard is a handful of GETs,
// not 100k. A key kept both in its shard's manifest and in the root one
// (written before shards had manifests of their own) is yielded once,
// from its shard's.
func (s *Store) Scan(ctx context.Context, fn func(key []byte, s streaming.Snapshot) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	gs, err := s.allGroups(ctx)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, g := range slices.Concat(gs[1:], gs[:1]) { // the root last
		skip := func(key string) bool { return false }
		if g == s.root && len(seen) > 0 {
			skip = func(key string) bool { return seen[key] }
		}
		if err := g.scan(ctx, skip, func(key []byte, snap streaming.Snapshot) error {
			if g != s.root {
				seen[string(key)] = true
			}
			return fn(key, snap)
		}); err != nil {
			return err
		}
	}
	return nil
}

// ListKeys returns every key of every manifest: one LIST of the shard
// manifests, and a GET of each manifest not yet loaded.
func (s *Store) ListKeys(ctx context.Context) ([][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	gs, err := s.allGroups(ctx)
	if err != nil {
		return nil, err
	}
	return keysOf(ctx, gs, nil)
}

// ListShardKeys implements streaming.ShardKeyLister: the keys of shard's
// manifest, and of the root manifest (where keys written before shards
// had manifests of their own stay): a GET of each not yet loaded, and no
// LIST of the other shards' folders, which ListKeys makes. Keys a custom
// WithShardOf puts elsewhere are not found.
func (s *Store) ListShardKeys(ctx context.Context, shard string) ([][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	gs := []*group{s.root}
	if s.cfg.shardOf != nil {
		gs = append(gs, s.group(shardFolder(shard), shard))
	}
	return keysOf(ctx, gs, func(k string) bool {
		sh, ok := streaming.CheckpointKeyShard([]byte(k))
		return ok && sh == shard
	})
}

// keysOf returns the keys of gs' manifests that keep (nil: all) keeps,
// each once, loading each manifest not loaded yet.
func keysOf(ctx context.Context, gs []*group, keep func(key string) bool) ([][]byte, error) {
	seen := map[string]bool{}
	var keys [][]byte
	for _, g := range gs {
		st, err := g.ensure(ctx)
		if err != nil {
			return nil, err
		}
		for k := range st.m.index {
			if !seen[k] && (keep == nil || keep(k)) {
				seen[k] = true
				keys = append(keys, []byte(k))
			}
		}
	}
	return keys, nil
}

// Delete removes key with one manifest PUT (and a DeleteObjects if its
// segment is now empty). Deleting an absent key sends nothing.
func (s *Store) Delete(ctx context.Context, key []byte) error {
	return s.DeleteKeys(ctx, [][]byte{key})
}

// DeleteKeys removes many keys in one commit per manifest they are in:
// one manifest PUT, then one DeleteObjects for the segments left empty.
// Absent keys are ignored. A shard's key still in the root manifest
// (written before shards had manifests of their own) is removed from it
// too; the root manifest may be shared by several workers, so that commit
// is retried on a conflict (deletes commute).
func (s *Store) DeleteKeys(ctx context.Context, keys [][]byte) error {
	if len(keys) == 0 {
		return ctx.Err()
	}
	var order []*group
	byGroup := map[*group][][]byte{}
	var legacy [][]byte
	for _, k := range keys {
		g := s.groupFor(k)
		if byGroup[g] == nil {
			order = append(order, g)
		}
		byGroup[g] = append(byGroup[g], k)
		if g != s.root {
			legacy = append(legacy, k)
		}
	}
	for _, g := range order {
		if err := g.commit(ctx, nil, byGroup[g], false); err != nil {
			return err
		}
	}
	if len(legacy) == 0 {
		return nil
	}
	for attempt := 1; ; attempt++ {
		st, err := s.root.ensure(ctx)
		if err != nil {
			return err
		}
		var present [][]byte
		for _, k := range legacy {
			if _, ok := st.m.index[string(k)]; ok {
				present = append(present, k)
			}
		}
		if len(present) == 0 {
			return nil
		}
		err = s.root.commit(ctx, nil, present, false)
		if !errors.Is(err, ErrConflict) || attempt == 5 {
			return err
		}
	}
}

// Compact rewrites every segment holding dead bytes into one new segment
// per manifest, commits, deletes the old segments, and removes orphaned
// segment objects that no manifest names (left by a crash between the
// segment PUT and the manifest PUT, or by a failed delete), up to each
// manifest's committed generation. Like every write of a shard, it
// belongs to that shard's one writer.
func (s *Store) Compact(ctx context.Context) error {
	gs, err := s.allGroups(ctx)
	if err != nil {
		return err
	}
	for _, g := range gs {
		if err := g.compact(ctx); err != nil {
			return err
		}
	}
	return nil
}

// Stats describes the committed manifests, summed over the root and
// every shard.
type Stats struct {
	Generation  uint64 // commits so far
	Epoch       uint64 // highest epoch committed (with WithEpochFencing)
	Keys        int
	Segments    int
	RecordBytes uint64 // bytes of records in live segments
	LiveBytes   uint64 // of which still named by a key
	Shards      int    // manifests of shards (besides the root one)
}

// Stats returns the statistics of every committed manifest (one LIST,
// and a GET of each manifest not yet loaded).
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	gs, err := s.allGroups(ctx)
	if err != nil {
		return Stats{}, err
	}
	var out Stats
	for _, g := range gs {
		st, err := g.ensure(ctx)
		if err != nil {
			return Stats{}, err
		}
		if g != s.root && st.etag != "" {
			out.Shards++
		}
		out.Generation += st.m.gen
		out.Epoch = max(out.Epoch, st.m.epoch)
		out.Keys += len(st.m.index)
		out.Segments += len(st.m.segs)
		for _, sg := range st.m.segs {
			out.RecordBytes += sg.data
			out.LiveBytes += sg.live
		}
	}
	return out, nil
}

const segmentDir = "seg/"

// maxPutBytes is S3's limit on the body of one PutObject (5 GiB), and so
// the largest segment a manifest may name.
const maxPutBytes = 5 << 30

// segmentGeneration parses the generation out of a segment name
// ("seg/<generation:020d>-<random>.seg").
func segmentGeneration(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, segmentDir)
	if !ok || len(rest) < 20 {
		return 0, false
	}
	gen, err := strconv.ParseUint(rest[:20], 10, 64)
	return gen, err == nil
}
