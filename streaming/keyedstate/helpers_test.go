package keyedstate_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"iter"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/coordination/vclock"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
	"github.com/tflo-io/tflo/streaming/ops"
)

// testDBOptions is a small in-memory Badger.
func testDBOptions() badger.Options {
	return badger.DefaultOptions("").WithInMemory(true).WithLogger(nil).
		WithMemTableSize(2 << 20).WithNumMemtables(2).WithBaseTableSize(64 << 10).
		WithBlockCacheSize(1 << 20).WithIndexCacheSize(512 << 10).WithValueThreshold(64 << 10)
}

// testDBBytes is what a runtime over a test DB counts for it in its
// budget.
var testDBBytes = keyedstate.BadgerBytes(testDBOptions())

func openDB(t testing.TB) *badger.DB {
	t.Helper()
	db, err := badger.Open(testDBOptions())
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// smaGraph is value → sma(5) → sma(3): two stateful nodes per key.
func smaGraph(t testing.TB) *streaming.Graph {
	t.Helper()
	g, err := streaming.NewBuilder().
		Input("value").
		Node("smooth", func() streaming.Operator { return ops.NewSMA(5) }, "value").
		Node("trend", func() streaming.Operator { return ops.NewSMA(3) }, "smooth").
		Build()
	require.NoError(t, err)
	return g
}

type record struct {
	key   string
	ts    int64
	value float64
}

func makeRecords(seed uint64, n, keys int) []record {
	rng := rand.New(rand.NewPCG(seed, 11))
	out := make([]record, n)
	for i := range out {
		// A skewed key distribution: a few hot keys and a long tail.
		k := int(rng.ExpFloat64() * float64(keys) / 6)
		if k >= keys {
			k = rng.IntN(keys)
		}
		out[i] = record{key: fmt.Sprintf("sensor/%04d", k), ts: int64(i), value: rng.NormFloat64()*3 + 20}
	}
	return out
}

func seqCursor(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)) }

func seqOf(t testing.TB, typ string, c []byte) int {
	t.Helper()
	require.Equal(t, "seq", typ)
	require.Len(t, c, 8)
	return int(binary.BigEndian.Uint64(c))
}

// recordLog applies records to rt one at a time, each its own key's
// next record (timestamp and value its index), and keeps them for
// reference.
type recordLog struct {
	t    *testing.T
	rt   *keyedstate.Runtime[string]
	recs []record
}

// saveAndRestore saves the runtime's next cut (after which no key is
// dirty) and returns a fresh runtime of g restored from it, at the
// cursor after the log's records.
func (l *recordLog) saveAndRestore(g *streaming.Graph) *keyedstate.Runtime[string] {
	l.t.Helper()
	ctx := context.Background()
	c, err := l.rt.Cut(ctx)
	require.NoError(l.t, err)
	pieces, err := collectPieces(l.t, c)
	require.NoError(l.t, err)
	c.Release(true)
	require.Zero(l.t, l.rt.Stats().DirtyKeys)
	rt2 := newRuntime(l.t, g, openDB(l.t))
	require.NoError(l.t, rt2.Restore(ctx, "seq", seqCursor(len(l.recs)), piecesSeq(pieces)))
	return rt2
}

func (l *recordLog) apply(k string) {
	l.t.Helper()
	r := record{key: k, ts: int64(len(l.recs)), value: float64(len(l.recs))}
	l.recs = append(l.recs, r)
	_, err := l.rt.Apply(r.key, r.ts, "seq", seqCursor(len(l.recs)), streaming.Float(r.value))
	require.NoError(l.t, err)
}

// reference runs records through an all-in-memory Keyed.
func reference(g *streaming.Graph, recs []record) *streaming.Keyed[string] {
	k := streaming.NewKeyed[string](g)
	for _, r := range recs {
		k.Eval(r.key, r.ts, streaming.Float(r.value))
	}
	return k
}

// requireSameState checks that rt holds exactly the state of ref.
func requireSameState(t *testing.T, ref *streaming.Keyed[string], rt *keyedstate.Runtime[string], allKeys []string) {
	t.Helper()
	for _, k := range allKeys {
		got, found, err := rt.Get(k)
		require.NoError(t, err)
		in, ok := ref.Lookup(k)
		if !ok {
			require.False(t, found, "key %q should not exist", k)
			continue
		}
		want, err := in.Save()
		require.NoError(t, err)
		require.True(t, found, "key %q missing", k)
		require.Equal(t, want, nonNil(got), "key %q", k)
	}
}

func nonNil(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

func keysOf(recs []record) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range recs {
		if !seen[r.key] {
			seen[r.key] = true
			out = append(out, r.key)
		}
	}
	return out
}

func newRuntime(t testing.TB, g *streaming.Graph, db *badger.DB, opts ...keyedstate.Option) *keyedstate.Runtime[string] {
	t.Helper()
	rt, err := keyedstate.New[string](g, keyedstate.StringKeys{}, db, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rt.Close() })
	return rt
}

// small makes a runtime that holds about `keys` instances and flushes
// often, so eviction and write-behind are exercised.
func small(keys int) []keyedstate.Option {
	return []keyedstate.Option{
		keyedstate.WithGCHeadroom(0),
		keyedstate.WithEntryBytes(1000),
		keyedstate.WithWriteBatchBytes(4 << 10),
		keyedstate.WithMemoryBudget(smallBudget(keys)),
		keyedstate.WithPieceBytes(2 << 10),
		keyedstate.WithSaveChunk(16),
	}
}

// hourTTL is small(4) with keys expiring after an hour unseen on the
// virtual clock it returns, and extra.
func hourTTL(extra ...keyedstate.Option) ([]keyedstate.Option, *vclock.Clock) {
	clock := vclock.New(time.Unix(1_700_000_000, 0))
	return append(append(small(4), keyedstate.WithKeyTTL(time.Hour), keyedstate.WithClock(clock.Now)), extra...), clock
}

// smaState is the saved state of an instance of g that saw one value.
func smaState(t testing.TB, g *streaming.Graph) []byte {
	t.Helper()
	in := g.NewInstance()
	in.Eval(1, streaming.Float(5))
	state, err := in.Save()
	require.NoError(t, err)
	return state
}

// smallBudget is the memory budget of small(keys).
func smallBudget(keys int) int64 { return int64(keys)*1000 + 8<<10 + testDBBytes }

// bigEntries are the options of a runtime whose cache holds about five
// keys of 100 kB entries (a changed-key list holding a 70 kB key stays
// under the spill threshold).
func bigEntries() []keyedstate.Option {
	return []keyedstate.Option{
		keyedstate.WithGCHeadroom(0),
		keyedstate.WithEntryBytes(100_000),
		keyedstate.WithWriteBatchBytes(4 << 10),
		keyedstate.WithMemoryBudget(6*100_000 + 8<<10 + testDBBytes),
	}
}

// piecesSeq yields pieces as a checkpoint's piece sequence.
func piecesSeq(pieces [][]byte) iter.Seq2[[]byte, error] {
	return func(yield func([]byte, error) bool) {
		for _, p := range pieces {
			if !yield(p, nil) {
				return
			}
		}
	}
}
