package coordtest

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
)

// oddKeys are keys a store must either refuse with a Fatal error or store
// and hand back byte for byte: wildcards, separators and control bytes of
// the common backends, non-ASCII, and very long keys.
var oddKeys = []string{
	"", ".", "..", "a..b", ".lead", "trail.", "a b", "a\tb", "a\nb", "a\x00b", "a\rb",
	"*", ">", "a.*", "a.>", "a*", "a>b", "$KV.x", "a/b", "a\\b", "%2F", "a:b", "a,b",
	"ü", "a.ü", "\u202e", "\xff", "😀",
	"-", "_", "=", "A-Z_0=9", "a.-.b", "x.=.y",
	strings.Repeat("k", 255),
	strings.Repeat("a.", 300) + "z",
	strings.Repeat("x", 4000),
	strings.Repeat("y", 70000),
}

// testOddKeys: every odd key is refused as Fatal (and nothing is written)
// or round-trips exactly through Get, List and Watch.
func testOddKeys(t *testing.T, h Harness) {
	s, c := h.Store, ctx(t)
	kept := map[string]coordination.Revision{}
	for _, key := range oddKeys {
		name := key
		if len(name) > 40 {
			name = fmt.Sprintf("%.20q…(%d bytes)", key, len(key))
		}
		v := []byte("v:" + key)
		o, err := s.Create(c, dur, key, v)
		if err != nil {
			require.True(t, coordination.IsFatal(err), "key %s: refused, but not as Fatal: %.300v", name, err)
			_, gerr := s.Get(c, dur, key)
			require.True(t, coordination.IsFatal(gerr) || errors.Is(gerr, coordination.ErrNotFound),
				"key %s: Get after a refused Create: %.300v", name, gerr)
			continue
		}
		require.True(t, o.Won(), "key %s: Create of a fresh key lost", name)
		kept[key] = o.Revision()
		e, err := s.Get(c, dur, key)
		require.NoError(t, err, "key %s", name)
		require.Equal(t, key, e.Key, "key %s: Get returns another key", name)
		require.True(t, bytes.Equal(v, e.Value), "key %s: value changed", name)
	}
	require.NotEmpty(t, kept, "the store refused even the portable keys")

	list, err := s.List(c, dur, "")
	require.NoError(t, err)
	requireListing(t, list)
	require.Len(t, list, len(kept), "listing holds exactly the stored keys")
	for _, e := range list {
		rev, ok := kept[e.Key]
		require.True(t, ok, "listing holds %q, which was never stored", e.Key)
		require.Equal(t, rev, e.Revision)
		require.Equal(t, "v:"+e.Key, string(e.Value))
	}

	m := newMirror(t, h, dur, "")
	m.until(func(ev coordination.WatchEvent) bool { return ev.Kind == coordination.EventSnapshotDone })
	require.Len(t, m.view, len(kept))
	for key, rev := range kept {
		require.Equal(t, rev, m.view[key].Revision, "watch snapshot of %.40q", key)
	}
	for key := range kept {
		o, err := s.Delete(c, dur, key, kept[key])
		require.NoError(t, err)
		require.True(t, o.Won())
		requireAbsent(t, s, dur, key)
	}
}

// testLargeValues: a 2 MiB value, and values at and just over the
// backend's documented limit, are either stored exactly or refused with a
// Fatal error (never Retryable: a retry cannot succeed) that leaves the key
// as it was.
func testLargeValues(t *testing.T, h Harness) {
	k := ck{t}
	s, c := h.Store, ctx(t)
	sizes := []int{2 << 20}
	if h.MaxValueSize > 0 {
		sizes = append(sizes, h.MaxValueSize, h.MaxValueSize+1)
	}
	for _, size := range sizes {
		fits := h.MaxValueSize == 0 || size <= h.MaxValueSize
		key := fmt.Sprintf("big.v%d", size)
		v := value(size, key)
		o, err := s.Create(c, dur, key, v)
		if !fits {
			require.Error(t, err, "a %d-byte value is above the documented %d-byte limit", size, h.MaxValueSize)
			require.True(t, coordination.IsFatal(err), "a %d-byte value: a retry can never succeed, so the refusal must be Fatal: %v", size, err)
			requireAbsent(t, s, dur, key)

			r := k.win(s.Create(c, dur, key, []byte("small")))
			_, err = s.Update(c, dur, key, v, r)
			require.True(t, coordination.IsFatal(err), "update to a %d-byte value: %v", size, err)
			requireValue(t, s, dur, key, "small", r)
			continue
		}
		r := k.win(o, err)
		e, err := s.Get(c, dur, key)
		require.NoError(t, err)
		require.True(t, bytes.Equal(v, e.Value), "a %d-byte value came back changed", size)
		v2 := value(size, key+"-2")
		r2 := k.win(s.Update(c, dur, key, v2, r))
		e, err = s.Get(c, dur, key)
		require.NoError(t, err)
		require.Equal(t, r2, e.Revision)
		require.True(t, bytes.Equal(v2, e.Value), "a %d-byte update came back changed", size)
	}
}
