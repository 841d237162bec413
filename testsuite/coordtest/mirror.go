package coordtest

import (
	"bytes"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
)

// mirror is what a watch consumer builds: a map of the live keys under a
// prefix, fed one event at a time from the test goroutine. When the stream
// breaks with a Retryable error it re-watches and starts over from the new
// snapshot, as the contract tells consumers to.
type mirror struct {
	t      *testing.T
	h      Harness
	ks     coordination.Keyspace
	prefix string

	w    coordination.Watcher
	view map[string]coordination.Entry
	// rewatches counts broken streams the mirror recovered from.
	rewatches int
}

func newMirror(t *testing.T, h Harness, ks coordination.Keyspace, prefix string) *mirror {
	t.Helper()
	m := &mirror{t: t, h: h, ks: ks, prefix: prefix}
	m.watch()
	t.Cleanup(func() { m.w.Close() })
	return m
}

func (m *mirror) watch() {
	m.t.Helper()
	w, err := m.h.Store.Watch(ctx(m.t), m.ks, m.prefix)
	require.NoError(m.t, err)
	m.w = w
	m.view = map[string]coordination.Entry{}
}

// step receives one event, applies it to the view and returns it.
func (m *mirror) step() coordination.WatchEvent {
	m.t.Helper()
	timer := time.NewTimer(m.h.EventWait)
	defer timer.Stop()
	for {
		select {
		case ev, ok := <-m.w.Events():
			if ok {
				m.apply(ev)
				return ev
			}
			err := m.w.Err()
			require.True(m.t, coordination.IsRetryable(err), "a watch may end only with a Retryable error while its context is live, got %v", err)
			m.rewatches++
			require.Less(m.t, m.rewatches, 100, "the watch keeps breaking: %v", err)
			m.watch()
		case <-timer.C:
			m.t.Fatalf("no watch event within %v (view has %d keys)", m.h.EventWait, len(m.view))
		}
	}
}

func (m *mirror) apply(ev coordination.WatchEvent) {
	m.t.Helper()
	cur, have := m.view[ev.Key]
	switch ev.Kind {
	case coordination.EventPut:
		require.False(m.t, have && ev.Revision <= cur.Revision,
			"put of %q at revision %d after revision %d: events of one key must arrive in revision order", ev.Key, ev.Revision, cur.Revision)
		m.view[ev.Key] = coordination.Entry{Key: ev.Key, Value: append([]byte(nil), ev.Value...), Revision: ev.Revision}
	case coordination.EventDelete:
		if have && ev.Revision > cur.Revision {
			delete(m.view, ev.Key)
		}
	}
}

// until steps until done reports true for an applied event.
func (m *mirror) until(done func(coordination.WatchEvent) bool) {
	m.t.Helper()
	for !done(m.step()) {
	}
}

// untilPut steps until the put of key at rev has been applied.
func (m *mirror) untilPut(key string, rev coordination.Revision) {
	m.t.Helper()
	m.until(func(ev coordination.WatchEvent) bool {
		return ev.Kind == coordination.EventPut && ev.Key == key && ev.Revision >= rev
	})
}

// requireMatchesList checks that the view holds exactly what a listing of
// the prefix holds: the same keys, revisions and values.
func (m *mirror) requireMatchesList() {
	m.t.Helper()
	list, err := m.h.Store.List(ctx(m.t), m.ks, m.prefix)
	require.NoError(m.t, err)
	requireListing(m.t, list)
	listed := make(map[string]coordination.Entry, len(list))
	for _, e := range list {
		listed[e.Key] = e
	}
	for key, e := range m.view {
		l, ok := listed[key]
		require.True(m.t, ok, "the watch holds %q (revision %d) but the listing does not: a delete was lost", key, e.Revision)
		require.Equal(m.t, l.Revision, e.Revision, "revision of %q: watch vs listing", key)
		require.True(m.t, bytes.Equal(l.Value, e.Value), "value of %q differs between watch and listing", key)
	}
	for key, l := range listed {
		_, ok := m.view[key]
		require.True(m.t, ok, "the listing holds %q (revision %d) but the watch does not: a put was lost", key, l.Revision)
	}
}

// requireListing checks a listing's shape: sorted, each key once.
func requireListing(t *testing.T, list []coordination.Entry) {
	t.Helper()
	require.True(t, sort.SliceIsSorted(list, func(i, j int) bool { return list[i].Key < list[j].Key }), "listing is not sorted by key")
	for i := 1; i < len(list); i++ {
		require.NotEqual(t, list[i-1].Key, list[i].Key, "listing returns %q twice (revisions %d and %d)", list[i].Key, list[i-1].Revision, list[i].Revision)
	}
}
