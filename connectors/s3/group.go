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
	"sync"

	"github.com/tflo-io/tflo/streaming"
)

// group is one commit point of a Store: a manifest and the segments it
// names, in one folder of the bucket (the prefix itself for keys of no
// shard, shards/<shard>/ for a shard's keys). Its commits are serialised;
// loads run in parallel with each other and with a commit.
type group struct {
	obj   *objects // the group's folder
	cfg   *config
	shard string // "" for the root group

	wmu    sync.Mutex // serialises commits and compaction
	loadMu sync.Mutex // serialises manifest loads
	mu     sync.RWMutex
	cur    *state // nil: not loaded (or forgotten after an uncertain commit)
}

// ensure returns the current state, loading the manifest if needed
// (one GET).
func (g *group) ensure(ctx context.Context) (*state, error) {
	g.mu.RLock()
	st := g.cur
	g.mu.RUnlock()
	if st != nil {
		return st, nil
	}
	g.loadMu.Lock()
	defer g.loadMu.Unlock()
	g.mu.RLock()
	st = g.cur
	g.mu.RUnlock()
	if st != nil {
		return st, nil
	}
	st, err := g.readManifest(ctx)
	if err != nil {
		return nil, err
	}
	// A commit may have installed a newer manifest while this one was in
	// flight (after a forget): never replace it with an older one.
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.cur == nil || g.cur.m.gen < st.m.gen {
		g.cur = st
	}
	return g.cur, nil
}

func (g *group) readManifest(ctx context.Context) (*state, error) {
	body, etag, err := g.obj.get(ctx, manifestName, maxManifestBytes)
	if isNotFound(err) {
		return &state{m: &manifest{segs: map[string]*segment{}, index: map[string]loc{}}}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("s3 state store: load manifest: %w", err)
	}
	m, err := parseManifest(body)
	if err != nil {
		return nil, fmt.Errorf("s3 state store: manifest %s: %w", g.obj.uri(manifestName), err)
	}
	return &state{m: m, etag: etag}, nil
}

// forget drops the cached manifest so the next call rereads it.
func (g *group) forget() {
	g.mu.Lock()
	g.cur = nil
	g.mu.Unlock()
}

// commit applies puts and dels to a copy of the manifest, writes the new
// segment (if any records), then the manifest (the commit point), then
// deletes segments no longer named. Any failure before the manifest PUT
// leaves the committed state unchanged; a failed or uncertain manifest PUT
// makes the Store forget its cache.
func (g *group) commit(ctx context.Context, puts []streaming.KeyedSnapshot, dels [][]byte, force bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	g.wmu.Lock()
	defer g.wmu.Unlock()
	if !g.cfg.conditional {
		// An unconditional PUT cannot refuse a stale base: start from the
		// manifest on the server (one GET), whose epoch the fence checks.
		g.forget()
	}
	st, err := g.ensure(ctx)
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
			if g.cfg.epochFencing && uint64(it.Snapshot.Meta.Epoch) < old.epoch {
				return fmt.Errorf("s3 state store %s: snapshot key %s at epoch %d is older than the committed epoch %d: %w",
					g.obj.uri(manifestName), streaming.QuoteKey(it.Key), it.Snapshot.Meta.Epoch, old.epoch, streaming.ErrFenced)
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
	if !g.cfg.epochFencing {
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
	compact := force || (g.cfg.compactRatio > 0 && data-live >= g.cfg.compactMinBytes &&
		float64(data-live) > g.cfg.compactRatio*float64(data))
	victims := map[string]bool{}
	for n, sg := range m.segs {
		switch {
		case sg.live == 0:
			garbage = append(garbage, n)
			delete(m.segs, n)
			changed = true
		case compact && sg.live < sg.data && (force || float64(sg.data-sg.live) >= g.cfg.compactRatio*float64(sg.data)):
			victims[n] = true
		}
	}
	// Too many segments (many small batches): fold the smallest into the
	// new segment, down to half the bound.
	if bound := g.cfg.maxSegments; bound > 0 && len(m.segs)-len(victims)+1 > bound {
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
		if err := g.moveLive(ctx, m, victims, &b, newName); err != nil {
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
				g.obj.uri(newName), b.count, len(body), maxPutBytes)
		}
		if _, err := g.obj.put(ctx, newName, body, "", ""); err != nil {
			return fmt.Errorf("s3 state store: write segment of %d records: %w", b.count, err)
		}
		m.segs[newName] = &segment{name: newName, size: uint64(len(body)), data: data, live: data - newDead}
	}

	var ifMatch, ifNoneMatch string
	if g.cfg.conditional {
		if st.etag == "" {
			ifNoneMatch = "*"
		} else {
			ifMatch = st.etag
		}
	}
	body := encodeManifest(m)
	if g.cfg.compressManifest {
		body = compressManifest(body)
	}
	etag, err := g.obj.put(ctx, manifestName, body, ifMatch, ifNoneMatch)
	if err != nil && isPreconditionFailed(err) {
		// A PUT retried after its reply was lost is refused by the write
		// it repeats: then the server's manifest is this one, byte for
		// byte (it names the new segment, whose name is random).
		if got, tag, gerr := g.obj.get(ctx, manifestName, maxManifestBytes); gerr == nil && bytes.Equal(got, body) {
			etag, err = tag, nil
		}
	}
	if err != nil {
		g.forget()
		if isPreconditionFailed(err) {
			return fmt.Errorf("s3 state store %s: commit %d refused: %w: %w", g.obj.uri(manifestName), m.gen, ErrConflict, err)
		}
		return fmt.Errorf("s3 state store: commit manifest generation %d: %w", m.gen, err)
	}
	g.mu.Lock()
	if etag == "" {
		g.cur = nil // the server returned no ETag: reread before the next commit
	} else {
		g.cur = &state{m: m, etag: etag}
	}
	g.mu.Unlock()

	if len(garbage) > 0 {
		slices.Sort(garbage)
		// The commit stands; a failed delete only leaves orphans that
		// Compact sweeps.
		if err := g.obj.deleteMany(ctx, garbage); err != nil {
			g.cfg.logger.Warn("s3 state store: delete unreferenced segments", "count", len(garbage), "err", err)
		}
	}
	return nil
}

// moveLive copies the live records of victim segments (one whole-object
// GET each) into b and points their keys at the new segment.
func (g *group) moveLive(ctx context.Context, m *manifest, victims map[string]bool, b *segmentBuilder, newName string) error {
	byVictim := map[string][]string{}
	for k, l := range m.index {
		if victims[l.seg] {
			byVictim[l.seg] = append(byVictim[l.seg], k)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(victims)) {
		body, err := g.getSegment(ctx, m.segs[name])
		if err != nil {
			return fmt.Errorf("s3 state store: compaction: %w", err)
		}
		if _, err := checkSegment(body); err != nil {
			return fmt.Errorf("s3 state store: compaction: segment %s: %w", g.obj.uri(name), err)
		}
		keys := byVictim[name]
		slices.Sort(keys)
		for _, k := range keys {
			l := m.index[k]
			if l.off+l.n > uint64(len(body)) {
				return fmt.Errorf("s3 state store: compaction: segment %s: key %s record runs past the object: %w", g.obj.uri(name), streaming.QuoteKey(k), streaming.ErrCorrupt)
			}
			e := b.addRaw([]byte(k), body[l.off:l.off+l.n])
			m.index[k] = loc{seg: newName, off: e.off, n: e.n}
		}
	}
	return nil
}

// getSegment reads a whole segment the manifest names; the object must
// have the size the manifest says (at most maxPutBytes), which is checked
// before its body is read.
func (g *group) getSegment(ctx context.Context, sg *segment) ([]byte, error) {
	body, _, err := g.obj.get(ctx, sg.name, int64(sg.size))
	if err != nil {
		return nil, err
	}
	if uint64(len(body)) != sg.size {
		return nil, fmt.Errorf("segment %s is %d bytes, the manifest says %d: %w", g.obj.uri(sg.name), len(body), sg.size, streaming.ErrCorrupt)
	}
	return body, nil
}

// load returns key's snapshot from this group with one ranged GET (plus
// one GET of the manifest on first use); found is false when the
// manifest does not name key.
func (g *group) load(ctx context.Context, key []byte) (snap streaming.Snapshot, found bool, err error) {
	for attempt := 0; ; attempt++ {
		st, err := g.ensure(ctx)
		if err != nil {
			return streaming.Snapshot{}, false, err
		}
		l, ok := st.m.index[string(key)]
		if !ok {
			return streaming.Snapshot{}, false, nil
		}
		rec, err := g.obj.getRange(ctx, l.seg, l.off, l.n)
		if isNotFound(err) && attempt == 0 {
			// Another writer compacted the segment away after this Store
			// read the manifest: reread it once.
			g.forget()
			continue
		}
		if err != nil {
			return streaming.Snapshot{}, false, fmt.Errorf("s3 state store: snapshot key %s: %w", streaming.QuoteKey(key), err)
		}
		snap, err := decodeLoaded(g.obj.uri(l.seg), key, rec)
		return snap, err == nil, err
	}
}

// scan calls fn for every live key of the group not skipped, one GET per
// segment (see Store.Scan).
func (g *group) scan(ctx context.Context, skip func(key string) bool, fn func(key []byte, s streaming.Snapshot) error) error {
	st, err := g.ensure(ctx)
	if err != nil {
		return err
	}
	// Live records by segment: one pass over the index instead of a key
	// lookup per record read.
	type span struct{ off, n uint64 }
	bySeg := make(map[string][]span, len(st.m.segs))
	for k, l := range st.m.index {
		if !skip(k) {
			bySeg[l.seg] = append(bySeg[l.seg], span{l.off, l.n})
		}
	}
	for _, name := range slices.Sorted(maps.Keys(bySeg)) {
		spans := bySeg[name] // the body is in memory: order does not matter
		body, err := g.getSegment(ctx, st.m.segs[name])
		if err != nil {
			return fmt.Errorf("s3 state store: scan: %w", err)
		}
		uri := g.obj.uri(name)
		if _, err := checkSegment(body); err != nil {
			return fmt.Errorf("s3 state store: scan: segment %s: %w", uri, err)
		}
		for _, sp := range spans {
			key, raw, err := decodeRecord(body[sp.off : sp.off+sp.n])
			if err != nil {
				return fmt.Errorf("s3 state store %s: record at %d: %w", uri, sp.off, err)
			}
			snap, err := streaming.UnmarshalSnapshot(raw)
			if err != nil {
				return fmt.Errorf("s3 state store %s: snapshot key %s: %w", uri, streaming.QuoteKey(key), err)
			}
			if err := fn(key, snap); err != nil {
				return err
			}
		}
	}
	return nil
}

// compact is Store.Compact for one group.
func (g *group) compact(ctx context.Context) error {
	if err := g.commit(ctx, nil, nil, true); err != nil {
		return err
	}
	g.wmu.Lock()
	defer g.wmu.Unlock()
	st, err := g.ensure(ctx)
	if err != nil {
		return err
	}
	objs, err := g.obj.list(ctx, segmentDir)
	if err != nil {
		return fmt.Errorf("s3 state store: sweep orphaned segments: %w", err)
	}
	var orphans []string
	for _, o := range objs {
		// A segment of a generation above the manifest's may belong to a
		// commit in flight elsewhere (which will then lose its conditional
		// manifest PUT or win and name it): leave it to a later sweep.
		if gen, ok := segmentGeneration(o.name); ok && validSegmentName(o.name) && gen <= st.m.gen && st.m.segs[o.name] == nil {
			orphans = append(orphans, o.name)
		}
	}
	if err := g.obj.deleteMany(ctx, orphans); err != nil {
		return fmt.Errorf("s3 state store: sweep orphaned segments: %w", err)
	}
	return nil
}
