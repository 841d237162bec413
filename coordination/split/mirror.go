package split

import (
	"bytes"
	"context"
	"maps"
	"sync"
	"time"

	"github.com/tflo-io/tflo/coordination"
)

// mirror keeps a local copy of one keyspace from a watch, re-watching when
// the stream breaks and re-listing every reconcile interval as the backstop
// for events a stream lost silently. It is a hint for deciding what to try:
// every decision that matters is re-checked by a CAS.
type mirror struct {
	store     coordination.Store
	ks        coordination.Keyspace
	clock     coordination.Clock
	retry     time.Duration
	reconcile time.Duration
	onChange  func()

	mu      sync.Mutex
	entries map[string]coordination.Entry
	seen    map[string]coordination.Revision // highest revision applied per key, deletes included
	applied map[string]uint64                // version at which the key was last applied
	version uint64
	synced  bool
}

func newMirror(s coordination.Store, ks coordination.Keyspace, clk coordination.Clock, retry, reconcile time.Duration, onChange func()) *mirror {
	return &mirror{
		store: s, ks: ks, clock: clk, retry: retry, reconcile: reconcile, onChange: onChange,
		entries: map[string]coordination.Entry{}, seen: map[string]coordination.Revision{}, applied: map[string]uint64{},
	}
}

func (m *mirror) snapshot() (map[string]coordination.Entry, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.entries), m.synced
}

// applyPut applies a put unless a newer revision of the key was seen. It
// reports a change only when the value differs: a rewrite with the same
// bytes (every lease and presence renewal) moves the revision silently, so
// renewals do not wake the control loop.
func (m *mirror) applyPut(e coordination.Entry) bool {
	if e.Revision <= m.seen[e.Key] {
		return false
	}
	old, had := m.entries[e.Key]
	m.version++
	m.seen[e.Key] = e.Revision
	m.applied[e.Key] = m.version
	m.entries[e.Key] = e
	return !had || !bytes.Equal(old.Value, e.Value)
}

func (m *mirror) applyDelete(key string, rev coordination.Revision) bool {
	if rev <= m.seen[key] {
		return false
	}
	m.version++
	m.seen[key] = rev
	m.applied[key] = m.version
	_, had := m.entries[key]
	delete(m.entries, key)
	return had
}

// dropMissing removes keys absent from a complete view, except those
// applied after the view was taken (version > since).
func (m *mirror) dropMissing(present map[string]bool, since uint64) bool {
	changed := false
	for k := range m.entries {
		if !present[k] && m.applied[k] <= since {
			delete(m.entries, k)
			changed = true
		}
	}
	return changed
}

func (m *mirror) changed() {
	if m.onChange != nil {
		m.onChange()
	}
}

// run watches until ctx ends; it owns the re-watch loop.
func (m *mirror) run(ctx context.Context) {
	for ctx.Err() == nil {
		m.watchOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		m.mu.Lock()
		m.synced = false
		m.mu.Unlock()
		if !sleep(ctx, m.clock, m.retry) {
			return
		}
	}
}

func (m *mirror) watchOnce(ctx context.Context) {
	m.mu.Lock()
	since := m.version
	m.mu.Unlock()
	w, err := m.store.Watch(ctx, m.ks, "")
	if err != nil {
		return
	}
	defer w.Close()
	inSnapshot := true
	present := map[string]bool{}
	for ev := range w.Events() {
		m.mu.Lock()
		changed := false
		switch ev.Kind {
		case coordination.EventPut:
			if inSnapshot {
				present[ev.Key] = true
			}
			changed = m.applyPut(ev.Entry)
		case coordination.EventDelete:
			changed = m.applyDelete(ev.Key, ev.Revision)
		case coordination.EventSnapshotDone:
			inSnapshot = false
			m.dropMissing(present, since)
			m.synced = true
			changed = true // synced: the control loop may act now
		}
		m.mu.Unlock()
		if changed {
			m.changed()
		}
	}
}

// reconcileLoop re-lists every reconcile interval until ctx ends.
func (m *mirror) reconcileLoop(ctx context.Context) {
	for sleep(ctx, m.clock, m.reconcile) {
		m.relist(ctx)
	}
}

func (m *mirror) relist(ctx context.Context) {
	m.mu.Lock()
	since := m.version
	m.mu.Unlock()
	entries, err := m.store.List(ctx, m.ks, "")
	if err != nil {
		return
	}
	m.mu.Lock()
	present := make(map[string]bool, len(entries))
	changed := false
	for _, e := range entries {
		present[e.Key] = true
		if m.applyPut(e) {
			changed = true
		}
	}
	if m.dropMissing(present, since) {
		changed = true
	}
	m.mu.Unlock()
	if changed {
		m.changed()
	}
}

// sleep waits d on clk; false when ctx ended first.
func sleep(ctx context.Context, clk coordination.Clock, d time.Duration) bool {
	t := clk.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return true
	case <-ctx.Done():
		return false
	}
}
