package s3

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tflo-io/tflo/streaming"
)

const manifestName = "manifest"

// Store is a streaming.StateStore on S3 that packs each batch into one
// segment object and commits it by rewriting one manifest object; see the
// package documentation for the layout, request costs and crash safety.
//
// A Store caches the manifest (the key index) from its first call and is
// the only writer of its prefix; Refresh rereads it. It is safe for
// concurrent use: commits are serialised, loads run in parallel.
type Store struct {
	obj *objects
	cfg config

	wmu    sync.Mutex // serialises commits and compaction
	loadMu sync.Mutex // serialises manifest loads
	mu     sync.RWMutex
	cur    *state // nil: not loaded (or forgotten after an uncertain commit)
}

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
	return &Store{obj: obj, cfg: cfg}, nil
}

// ensure returns the current state, loading the manifest if needed
// (one GET).
func (s *Store) ensure(ctx context.Context) (*state, error) {
	s.mu.RLock()
	st := s.cur
	s.mu.RUnlock()
	if st != nil {
		return st, nil
	}
	s.loadMu.Lock()
	defer s.loadMu.Unlock()
	s.mu.RLock()
	st = s.cur
	s.mu.RUnlock()
	if st != nil {
		return st, nil
	}
	st, err := s.readManifest(ctx)
	if err != nil {
		return nil, err
	}
	// A commit may have installed a newer manifest while this one was in
	// flight (after a forget): never replace it with an older one.
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil || s.cur.m.gen < st.m.gen {
		s.cur = st
	}
	return s.cur, nil
}

func (s *Store) readManifest(ctx context.Context) (*state, error) {
	body, etag, err := s.obj.get(ctx, manifestName)
	if isNotFound(err) {
		return &state{m: &manifest{segs: map[string]*segment{}, index: map[string]loc{}}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("s3 state store: load manifest: %w", err)
	}
	m, err := parseManifest(body)
	if err != nil {
		return nil, fmt.Errorf("s3 state store: manifest %s: %w", s.obj.uri(manifestName), err)
	}
	return &state{m: m, etag: etag}, nil
}

// forget drops the cached manifest so the next call rereads it.
func (s *Store) forget() {
	s.mu.Lock()
	s.cur = nil
	s.mu.Unlock()
}

// Refresh rereads the manifest, picking up commits of another process.
func (s *Store) Refresh(ctx context.Context) error {
	s.forget()
	_, err := s.ensure(ctx)
	return err
}

// Save stores one snapshot: a one-record segment and a manifest (2 PUTs).
// Checkpoints should use SaveBatch.
func (s *Store) Save(ctx context.Context, key []byte, snap streaming.Snapshot) error {
	return s.SaveBatch(ctx, []streaming.KeyedSnapshot{{Key: key, Snapshot: snap}})
}

// SaveBatch stores every item with one segment PUT and one manifest PUT,
// whatever the batch size (plus the GETs of segments being compacted when
// dead bytes pass the threshold). When a key appears twice, the later item
// wins. An empty batch sends nothing.
func (s *Store) SaveBatch(ctx context.Context, items []streaming.KeyedSnapshot) error {
	if len(items) == 0 {
		return ctx.Err()
	}
	return s.commit(ctx, items, nil, false)
}

// Load returns key's snapshot with one ranged GET (plus one GET of the
// manifest on the Store's first call).
func (s *Store) Load(ctx context.Context, key []byte) (streaming.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return streaming.Snapshot{}, err
	}
	for attempt := 0; ; attempt++ {
		st, err := s.ensure(ctx)
		if err != nil {
			return streaming.Snapshot{}, err
		}
		l, ok := st.m.index[string(key)]
		if !ok {
			return streaming.Snapshot{}, fmt.Errorf("s3 state store %s: snapshot key %q: %w", s.obj.uri(""), key, streaming.ErrNotFound)
		}
		rec, err := s.obj.getRange(ctx, l.seg, l.off, l.n)
		if isNotFound(err) && attempt == 0 {
			// Another writer compacted the segment away after this Store
			// read the manifest: reread it once.
			s.forget()
			continue
		}
		if err != nil {
			return streaming.Snapshot{}, fmt.Errorf("s3 state store: snapshot key %q: %w", key, err)
		}
		return decodeLoaded(s.obj.uri(l.seg), key, rec)
	}
}

func decodeLoaded(uri string, key, rec []byte) (streaming.Snapshot, error) {
	k, snap, err := decodeRecord(rec)
	if err == nil && !bytes.Equal(k, key) {
		err = fmt.Errorf("record holds key %q: %w", k, streaming.ErrCorrupt)
	}
	var out streaming.Snapshot
	if err == nil {
		out, err = streaming.UnmarshalSnapshot(snap)
	}
	if err != nil {
		return streaming.Snapshot{}, fmt.Errorf("s3 state store %s: snapshot key %q: %w", uri, key, err)
	}
	return out, nil
}

// Scan implements Scanner: each live segment is read whole (one GET, one
// segment in memory at a time) and its live records decoded in order.
// A restore of a 100k-key shard is a handful of GETs, not 100k.
func (s *Store) Scan(ctx context.Context, fn func(key []byte, s streaming.Snapshot) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	st, err := s.ensure(ctx)
	if err != nil {
		return err
	}
	// Live records by segment: one pass over the index instead of a key
	// lookup per record read.
	type span struct{ off, n uint64 }
	bySeg := make(map[string][]span, len(st.m.segs))
	var lastSeg string
	var last []span
	for _, l := range st.m.index {
		if l.seg != lastSeg {
			if lastSeg != "" {
				bySeg[lastSeg] = last
			}
			lastSeg, last = l.seg, bySeg[l.seg]
		}
		last = append(last, span{l.off, l.n})
	}
	if lastSeg != "" {
		bySeg[lastSeg] = last
	}
	for _, name := range slices.Sorted(maps.Keys(bySeg)) {
		spans := bySeg[name] // in index order: the body is in memory, order does not matter
		body, _, err := s.obj.get(ctx, name)
		if err != nil {
			return fmt.Errorf("s3 state store: scan: %w", err)
		}
		uri := s.obj.uri(name)
		if _, err := checkSegment(body); err != nil {
			return fmt.Errorf("s3 state store: scan: segment %s: %w", uri, err)
		}
		for _, sp := range spans {
			if sp.off+sp.n > uint64(len(body)) {
				return fmt.Errorf("s3 state store: scan: segment %s: record %d+%d runs past the object: %w", uri, sp.off, sp.n, streaming.ErrCorrupt)
			}
			key, raw, err := decodeRecord(body[sp.off : sp.off+sp.n])
			if err != nil {
				return fmt.Errorf("s3 state store %s: record at %d: %w", uri, sp.off, err)
			}
			snap, err := streaming.UnmarshalSnapshot(raw)
			if err != nil {
				return fmt.Errorf("s3 state store %s: snapshot key %q: %w", uri, key, err)
			}
			if err := fn(key, snap); err != nil {
				return err
			}
		}
	}
	return nil
}

// ListKeys returns every key of the manifest (no request after the first
// call).
func (s *Store) ListKeys(ctx context.Context) ([][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	st, err := s.ensure(ctx)
	if err != nil {
		return nil, err
	}
	keys := make([][]byte, 0, len(st.m.index))
	for k := range st.m.index {
		keys = append(keys, []byte(k))
	}
	return keys, nil
}

// Delete removes key with one manifest PUT (and a DeleteObjects if its
// segment is now empty). Deleting an absent key sends nothing.
func (s *Store) Delete(ctx context.Context, key []byte) error {
	return s.DeleteKeys(ctx, [][]byte{key})
}

// DeleteKeys removes many keys in one commit: one manifest PUT, then one
// DeleteObjects for the segments left empty. Absent keys are ignored.
func (s *Store) DeleteKeys(ctx context.Context, keys [][]byte) error {
	if len(keys) == 0 {
		return ctx.Err()
	}
	return s.commit(ctx, nil, keys, false)
}

// Compact rewrites every segment holding dead bytes into one new segment,
// commits, deletes the old segments, and removes orphaned segment objects
// that no manifest names (left by a crash between the segment PUT and the
// manifest PUT, or by a failed delete), up to the committed generation.
// Like every write, it belongs to the prefix's one writer.
func (s *Store) Compact(ctx context.Context) error {
	if err := s.commit(ctx, nil, nil, true); err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	st, err := s.ensure(ctx)
	if err != nil {
		return err
	}
	objs, err := s.obj.list(ctx, segmentDir)
	if err != nil {
		return fmt.Errorf("s3 state store: sweep orphaned segments: %w", err)
	}
	var orphans []string
	for _, o := range objs {
		// A segment of a generation above the manifest's may belong to a
		// commit in flight elsewhere (which will then lose its conditional
		// manifest PUT or win and name it): leave it to a later sweep.
		if gen, ok := segmentGeneration(o.name); ok && gen <= st.m.gen && st.m.segs[o.name] == nil {
			orphans = append(orphans, o.name)
		}
	}
	if err := s.obj.deleteMany(ctx, orphans); err != nil {
		return fmt.Errorf("s3 state store: sweep orphaned segments: %w", err)
	}
	return nil
}

// Stats describes the committed manifest.
type Stats struct {
	Generation  uint64 // commits so far
	Epoch       uint64 // highest epoch committed (with WithEpochFencing)
	Keys        int
	Segments    int
	RecordBytes uint64 // bytes of records in live segments
	LiveBytes   uint64 // of which still named by a key
}

// Stats returns the committed manifest's statistics (loading it if needed).
func (s *Store) Stats(ctx context.Context) (Stats, error) {
	st, err := s.ensure(ctx)
	if err != nil {
		return Stats{}, err
	}
	out := Stats{Generation: st.m.gen, Epoch: st.m.epoch, Keys: len(st.m.index), Segments: len(st.m.segs)}
	for _, sg := range st.m.segs {
		out.RecordBytes += sg.data
		out.LiveBytes += sg.live
	}
	return out, nil
}

const segmentDir = "seg/"

// maxPutBytes is S3's limit on the body of one PutObject (5 GiB).
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

// commit applies puts and dels to a copy of the manifest, writes the new
// segment (if any records), then the manifest (the commit point), then
// deletes segments no longer named. Any failure before the manifest PUT
// leaves the committed state unchanged; a failed or uncertain manifest PUT
// makes the Store forget its cache.
func (s *Store) commit(ctx context.Context, puts []streaming.KeyedSnapshot, dels [][]byte, force bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	st, err := s.ensure(ctx)
	if err != nil {
		return err
	}
	old := st.m
	m := &manifest{gen: old.gen + 1, epoch: old.epoch, segs: make(map[string]*segment, len(old.segs)+1), index: maps.Clone(old.index)}
	for n, sg := range old.segs {
		cp := *sg
		m.segs[n] = &cp
	}
	changed := false

	// New records. A key repeated in the batch is written each time; the
	// last occurrence wins and the earlier records are dead bytes of the
	// new segment (rare, and cheaper than a dedup map on every batch).
	var b segmentBuilder
	var newDead uint64
	newName := fmt.Sprintf("%s%020d-%08x.seg", segmentDir, m.gen, rand.Uint32())
	if len(puts) > 0 {
		size := 0
		for _, it := range puts {
			if s.cfg.epochFencing && uint64(it.Snapshot.Meta.Epoch) < old.epoch {
				return fmt.Errorf("s3 state store %s: snapshot key %q at epoch %d is older than the committed epoch %d: %w",
					s.obj.uri(manifestName), it.Key, it.Snapshot.Meta.Epoch, old.epoch, streaming.ErrFenced)
			}
			m.epoch = max(m.epoch, uint64(it.Snapshot.Meta.Epoch))
			size += 2*binary.MaxVarintLen32 + len(it.Key) + streaming.SnapshotEncodedLen(it.Snapshot)
		}
		b.grow(size + trailerLen)
		for _, it := range puts {
			k := string(it.Key)
			if prev, ok := m.index[k]; ok {
				if prev.seg == newName {
					newDead += prev.n
				} else {
					m.segs[prev.seg].live -= prev.n
				}
			}
			e := b.add(it.Key, it.Snapshot)
			m.index[k] = loc{seg: newName, off: e.off, n: e.n}
		}
		changed = true
	}
	if !s.cfg.epochFencing {
		m.epoch = old.epoch
	}
	for _, key := range dels {
		if prev, ok := m.index[string(key)]; ok {
			if prev.seg == newName {
				newDead += prev.n
			} else {
				m.segs[prev.seg].live -= prev.n
			}
			delete(m.index, string(key))
			changed = true
		}
	}

	// Segments to drop: empty ones, and compaction victims whose live
	// records move into the new segment.
	var garbage []string
	var data, live uint64
	for _, sg := range m.segs {
		data += sg.data
		live += sg.live
	}
	compact := force || (s.cfg.compactRatio > 0 && data-live >= s.cfg.compactMinBytes &&
		float64(data-live) > s.cfg.compactRatio*float64(data))
	victims := map[string]bool{}
	for n, sg := range m.segs {
		switch {
		case sg.live == 0:
			garbage = append(garbage, n)
			delete(m.segs, n)
			changed = true
		case compact && sg.live < sg.data && (force || float64(sg.data-sg.live) >= s.cfg.compactRatio*float64(sg.data)):
			victims[n] = true
		}
	}
	// Too many segments (many small batches): fold the smallest into the
	// new segment, down to half the bound.
	if bound := s.cfg.maxSegments; bound > 0 && len(m.segs)-len(victims)+1 > bound {
		var small []*segment
		for n, sg := range m.segs {
			if !victims[n] {
				small = append(small, sg)
			}
		}
		slices.SortFunc(small, func(a, b *segment) int { return cmp.Compare(a.live, b.live) })
		for _, sg := range small {
			if len(m.segs)-len(victims)+1 <= bound/2 {
				break
			}
			victims[sg.name] = true
		}
	}
	if len(victims) > 0 {
		if err := s.moveLive(ctx, m, victims, &b, newName); err != nil {
			return err
		}
		for n := range victims {
			garbage = append(garbage, n)
			delete(m.segs, n)
		}
		changed = true
	}
	if !changed {
		return nil
	}

	if b.count > 0 {
		body, data := b.finish()
		if len(body) > maxPutBytes {
			return fmt.Errorf("s3 state store %s: a segment of %d records is %d bytes, over S3's %d-byte single-PUT limit: split the batch",
				s.obj.uri(newName), b.count, len(body), maxPutBytes)
		}
		if _, err := s.obj.put(ctx, newName, body, "", ""); err != nil {
			return fmt.Errorf("s3 state store: write segment of %d records: %w", b.count, err)
		}
		m.segs[newName] = &segment{name: newName, size: uint64(len(body)), data: data, live: data - newDead}
	}

	var ifMatch, ifNoneMatch string
	if s.cfg.conditional {
		if st.etag == "" {
			ifNoneMatch = "*"
		} else {
			ifMatch = st.etag
		}
	}
	body := encodeManifest(m)
	if s.cfg.compressManifest {
		body = compressManifest(body)
	}
	etag, err := s.obj.put(ctx, manifestName, body, ifMatch, ifNoneMatch)
	if err != nil {
		s.forget()
		if isPreconditionFailed(err) {
			return fmt.Errorf("s3 state store %s: commit %d refused: %w (%w): %w", s.obj.uri(manifestName), m.gen, ErrConflict, streaming.ErrFenced, err)
		}
		return fmt.Errorf("s3 state store: commit manifest generation %d: %w", m.gen, err)
	}
	s.mu.Lock()
	if etag == "" {
		s.cur = nil // the server returned no ETag: reread before the next commit
	} else {
		s.cur = &state{m: m, etag: etag}
	}
	s.mu.Unlock()

	if len(garbage) > 0 {
		slices.Sort(garbage)
		// The commit stands; a failed delete only leaves orphans that
		// Compact sweeps.
		if err := s.obj.deleteMany(ctx, garbage); err != nil {
			s.cfg.logger.Warn("s3 state store: delete unreferenced segments", "count", len(garbage), "err", err)
		}
	}
	return nil
}

// moveLive copies the live records of victim segments (one whole-object
// GET each) into b and points their keys at the new segment.
func (s *Store) moveLive(ctx context.Context, m *manifest, victims map[string]bool, b *segmentBuilder, newName string) error {
	byVictim := map[string][]string{}
	for k, l := range m.index {
		if victims[l.seg] {
			byVictim[l.seg] = append(byVictim[l.seg], k)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(victims)) {
		body, _, err := s.obj.get(ctx, name)
		if err != nil {
			return fmt.Errorf("s3 state store: compaction: %w", err)
		}
		if _, err := checkSegment(body); err != nil {
			return fmt.Errorf("s3 state store: compaction: segment %s: %w", s.obj.uri(name), err)
		}
		keys := byVictim[name]
		slices.Sort(keys)
		for _, k := range keys {
			l := m.index[k]
			if l.off+l.n > uint64(len(body)) {
				return fmt.Errorf("s3 state store: compaction: segment %s: key %q record runs past the object: %w", s.obj.uri(name), k, streaming.ErrCorrupt)
			}
			e := b.addRaw([]byte(k), body[l.off:l.off+l.n])
			m.index[k] = loc{seg: newName, off: e.off, n: e.n}
		}
	}
	return nil
}
