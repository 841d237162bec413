package statetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

// Run runs the StateStore conformance suite against stores made by
// newStore, one fresh store per subtest.
func Run(t *testing.T, newStore func(t *testing.T) streaming.StateStore) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s streaming.StateStore)
	}{
		{"NotFound", testNotFound},
		{"RoundTrip", testRoundTrip},
		{"Overwrite", testOverwrite},
		{"Keys", testKeys},
		{"Batch", testBatch},
		{"BatchRepeatedKey", testBatchRepeatedKey},
		{"Delete", testDelete},
		{"List", testList},
		{"LargeValues", testLargeValues},
		{"NoAliasing", testNoAliasing},
		{"Cancelled", testCancelled},
		{"Concurrent", testConcurrent},
		{"DeleteKeys", testDeleteKeys},
		{"ListShardKeys", testListShardKeys},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

// KeyDeleter is the optional batch-delete capability of a StateStore:
// every key removed in a bounded number of requests, absent keys ignored.
// Run tests it on stores that have it.
type KeyDeleter interface {
	DeleteKeys(ctx context.Context, keys [][]byte) error
}

func testDeleteKeys(t *testing.T, s streaming.StateStore) {
	d, ok := s.(KeyDeleter)
	if !ok {
		t.Skip("store has no DeleteKeys")
	}
	ctx := context.Background()
	require.NoError(t, d.DeleteKeys(ctx, nil), "empty")
	var del, keep [][]byte
	for i, k := range oddKeys() {
		require.NoError(t, s.Save(ctx, k, fullSnapshot(i)))
		if i%3 == 0 {
			del = append(del, k)
		} else {
			keep = append(keep, k)
		}
	}
	require.NoError(t, d.DeleteKeys(ctx, append(del, []byte("never-saved"), del[0])), "absent and repeated keys are not errors")
	for _, k := range del {
		requireNotFound(t, s, k)
	}
	requireKeys(t, s, keep)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	require.ErrorIs(t, d.DeleteKeys(cctx, keep), context.Canceled)
	requireKeys(t, s, keep)
}

// testListShardKeys: a streaming.ShardKeyLister lists every checkpoint
// key of the shard asked, next to keys of a shard whose name it prefixes
// (readings/1 and readings/10), of a shard its name extends, and keys
// that are not checkpoint keys.
func testListShardKeys(t *testing.T, s streaming.StateStore) {
	l, ok := s.(streaming.ShardKeyLister)
	if !ok {
		t.Skip("store has no ListShardKeys")
	}
	ctx := context.Background()
	const shard = "kafka/p/readings/1"
	want := [][]byte{
		streaming.CheckpointManifestKey(shard),
		[]byte(streaming.CheckpointPieceKey(shard, 1, 1, 0)),
		[]byte(streaming.CheckpointPieceKey(shard, 2, 7, 3)),
	}
	others := [][]byte{
		streaming.CheckpointManifestKey(shard + "0"),
		[]byte(streaming.CheckpointPieceKey(shard+"0", 1, 1, 0)),
		[]byte(streaming.CheckpointPieceKey("kafka/p/readings", 1, 1, 0)),
		[]byte(shard + "/user-key"),
		[]byte(shard),
	}
	for i, k := range append(slices.Clone(want), others...) {
		require.NoError(t, s.Save(ctx, k, fullSnapshot(i)))
	}
	got, err := l.ListShardKeys(ctx, shard)
	require.NoError(t, err)
	var mine []string
	for _, k := range got {
		if sh, ok := streaming.CheckpointKeyShard(k); ok && sh == shard {
			mine = append(mine, string(k))
		}
	}
	require.ElementsMatch(t, sortedStrings(want), mine, "the shard's keys (others it may list: %q)", got)
}

// fullSnapshot returns a snapshot with every meta field set, distinct per
// seed.
func fullSnapshot(seed int) streaming.Snapshot {
	return streaming.Snapshot{
		Meta: streaming.SnapshotMeta{
			FormatVersion: streaming.SnapshotFormatVersion,
			CursorType:    "kafka",
			Cursor:        fmt.Appendf(nil, "cursor-%d\x00\xff", seed),
			Epoch:         streaming.Epoch(seed + 1),
			Operators: []streaming.OperatorInfo{
				{Node: "sma", Operator: "sma", TypeVersion: 2},
				{Node: fmt.Sprintf("n%d", seed), Operator: "threshold", TypeVersion: uint32(seed)},
			},
			SchemaFingerprint: fmt.Sprintf("fp-%08x", seed),
			CreatedUnixNano:   1_700_000_000_000_000_000 + int64(seed),
		},
		Data: fmt.Appendf(nil, "state of %d \x00\x01\xfe", seed),
	}
}

// requireSnapshot compares want and got field by field, treating nil and
// empty byte slices alike.
func requireSnapshot(t *testing.T, want, got streaming.Snapshot, msgAndArgs ...any) {
	t.Helper()
	want.Meta.FormatVersion = streaming.SnapshotFormatVersion
	want, got = normalize(want), normalize(got)
	// Compare big byte fields apart so a mismatch reports where, not a
	// hex dump of megabytes.
	requireSameBytes(t, "Data", want.Data, got.Data, msgAndArgs...)
	requireSameBytes(t, "Meta.Cursor", want.Meta.Cursor, got.Meta.Cursor, msgAndArgs...)
	want.Data, got.Data, want.Meta.Cursor, got.Meta.Cursor = nil, nil, nil, nil
	require.Equal(t, want, got, msgAndArgs...)
}

func requireSameBytes(t *testing.T, field string, want, got []byte, msgAndArgs ...any) {
	t.Helper()
	if bytes.Equal(want, got) {
		return
	}
	if len(want) < 256 && len(got) < 256 {
		require.Equal(t, want, got, "snapshot %s: %s", field, message(msgAndArgs))
	}
	i := 0
	for i < len(want) && i < len(got) && want[i] == got[i] {
		i++
	}
	require.Failf(t, "snapshot "+field+" differs", "want %d bytes, got %d, first difference at byte %d. %s", len(want), len(got), i, message(msgAndArgs))
}

// message formats testify-style msgAndArgs: a format string and its
// arguments, or one value.
func message(msgAndArgs []any) string {
	if len(msgAndArgs) == 0 {
		return ""
	}
	if f, ok := msgAndArgs[0].(string); ok {
		return fmt.Sprintf(f, msgAndArgs[1:]...)
	}
	return fmt.Sprint(msgAndArgs...)
}

func normalize(s streaming.Snapshot) streaming.Snapshot {
	if len(s.Data) == 0 {
		s.Data = nil
	}
	if len(s.Meta.Cursor) == 0 {
		s.Meta.Cursor = nil
	}
	if len(s.Meta.Operators) == 0 {
		s.Meta.Operators = nil
	}
	return s
}

func requireLoad(t *testing.T, s streaming.StateStore, key []byte, want streaming.Snapshot) {
	t.Helper()
	got, err := s.Load(context.Background(), key)
	require.NoError(t, err, "load key %q", key)
	requireSnapshot(t, want, got, "load key %q", key)
}

func requireNotFound(t *testing.T, s streaming.StateStore, key []byte) {
	t.Helper()
	got, err := s.Load(context.Background(), key)
	require.Error(t, err, "load of absent key %q returned nil error (snapshot %+v)", key, got)
	require.ErrorIs(t, err, streaming.ErrNotFound, "load of absent key %q", key)
}

func requireKeys(t *testing.T, s streaming.StateStore, want [][]byte) {
	t.Helper()
	got, err := s.ListKeys(context.Background())
	require.NoError(t, err)
	require.Equal(t, sortedStrings(want), sortedStrings(got))
}

func sortedStrings(keys [][]byte) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = string(k)
	}
	slices.Sort(out)
	return out
}

func testNotFound(t *testing.T, s streaming.StateStore) {
	requireNotFound(t, s, []byte("never-saved"))
	requireNotFound(t, s, []byte{})
	requireKeys(t, s, nil)
	ctx := context.Background()
	require.NoError(t, s.Save(ctx, []byte("a"), fullSnapshot(1)))
	requireNotFound(t, s, []byte("b"))
	requireNotFound(t, s, []byte("a\x00"))
	requireNotFound(t, s, []byte("A"))
}

func testRoundTrip(t *testing.T, s streaming.StateStore) {
	ctx := context.Background()
	cases := map[string]streaming.Snapshot{
		"full":        fullSnapshot(7),
		"zero":        {},
		"data only":   {Data: []byte{0}},
		"meta only":   {Meta: streaming.SnapshotMeta{CursorType: "mqtt", Epoch: 1 << 62}},
		"negative ts": {Meta: streaming.SnapshotMeta{CreatedUnixNano: -5}, Data: []byte("x")},
	}
	for name, snap := range cases {
		require.NoError(t, s.Save(ctx, []byte(name), snap), "save %q", name)
	}
	for name, snap := range cases {
		requireLoad(t, s, []byte(name), snap)
	}
}

func testOverwrite(t *testing.T, s streaming.StateStore) {
	ctx := context.Background()
	key := []byte("sensor/1")
	require.NoError(t, s.Save(ctx, key, fullSnapshot(1)))
	require.NoError(t, s.Save(ctx, key, fullSnapshot(2)))
	requireLoad(t, s, key, fullSnapshot(2))
	// A shorter value must not leave the tail of the longer one behind.
	short := streaming.Snapshot{Data: []byte("s")}
	require.NoError(t, s.Save(ctx, key, short))
	requireLoad(t, s, key, short)
	requireKeys(t, s, [][]byte{key})
}

// oddKeys are keys a store must keep apart and round-trip exactly.
func oddKeys() [][]byte {
	return [][]byte{
		{}, []byte(" "), []byte("  "), []byte("\x00"), []byte("\x00\x00"), {0xff, 0xfe, 0x80},
		[]byte("a"), []byte("A"), []byte("a/b"), []byte("a/b/"), []byte("/a"), []byte("//"),
		[]byte("."), []byte(".."), []byte("../etc/passwd"), []byte("a/./b"), []byte("a."),
		[]byte(".tmp"), []byte(".tmp-123"), []byte("a\\b"), []byte("%2F"), []byte("a%2Fb"),
		[]byte("CON"), []byte("con"), []byte("nul.txt"), []byte("日本語/センサー"),
		[]byte("with\nnewline"), []byte("s-"), []byte("h-00"), []byte("key:with|odd*chars?<>\""),
		bytes.Repeat([]byte("long/"), 200), bytes.Repeat([]byte{0xff}, 300),
	}
}

func testKeys(t *testing.T, s streaming.StateStore) {
	ctx := context.Background()
	keys := oddKeys()
	for i, k := range keys {
		require.NoError(t, s.Save(ctx, k, fullSnapshot(i)), "save key %q", k)
	}
	for i, k := range keys {
		requireLoad(t, s, k, fullSnapshot(i))
	}
	requireKeys(t, s, keys)
	for i, k := range keys {
		if i%2 == 0 {
			require.NoError(t, s.Delete(ctx, k), "delete key %q", k)
		}
	}
	var left [][]byte
	for i, k := range keys {
		if i%2 == 0 {
			requireNotFound(t, s, k)
		} else {
			requireLoad(t, s, k, fullSnapshot(i))
			left = append(left, k)
		}
	}
	requireKeys(t, s, left)
}

func testBatch(t *testing.T, s streaming.StateStore) {
	ctx := context.Background()
	require.NoError(t, s.SaveBatch(ctx, nil), "empty batch")
	requireKeys(t, s, nil)

	require.NoError(t, s.Save(ctx, []byte("k0"), streaming.Snapshot{Data: []byte("old")}))
	const n = 500
	items := make([]streaming.KeyedSnapshot, n)
	keys := make([][]byte, n)
	for i := range items {
		keys[i] = fmt.Appendf(nil, "k%d", i)
		items[i] = streaming.KeyedSnapshot{Key: keys[i], Snapshot: fullSnapshot(i)}
	}
	items = append(items, streaming.KeyedSnapshot{Key: oddKeys()[len(oddKeys())-1], Snapshot: fullSnapshot(-1)})
	keys = append(keys, oddKeys()[len(oddKeys())-1])
	require.NoError(t, s.SaveBatch(ctx, items))
	for _, it := range items {
		requireLoad(t, s, it.Key, it.Snapshot)
	}
	requireKeys(t, s, keys)
}

func testBatchRepeatedKey(t *testing.T, s streaming.StateStore) {
	ctx := context.Background()
	var items []streaming.KeyedSnapshot
	for i := range 50 {
		items = append(items, streaming.KeyedSnapshot{Key: []byte("same"), Snapshot: fullSnapshot(i)})
		items = append(items, streaming.KeyedSnapshot{Key: fmt.Appendf(nil, "other%d", i), Snapshot: fullSnapshot(i)})
	}
	require.NoError(t, s.SaveBatch(ctx, items))
	requireLoad(t, s, []byte("same"), fullSnapshot(49))
}

func testDelete(t *testing.T, s streaming.StateStore) {
	ctx := context.Background()
	require.NoError(t, s.Delete(ctx, []byte("absent")), "deleting an absent key is not an error")
	require.NoError(t, s.Save(ctx, []byte("a"), fullSnapshot(1)))
	require.NoError(t, s.Save(ctx, []byte("b"), fullSnapshot(2)))
	require.NoError(t, s.Delete(ctx, []byte("a")))
	requireNotFound(t, s, []byte("a"))
	requireLoad(t, s, []byte("b"), fullSnapshot(2))
	require.NoError(t, s.Delete(ctx, []byte("a")), "second delete")
	requireKeys(t, s, [][]byte{[]byte("b")})
	require.NoError(t, s.Save(ctx, []byte("a"), fullSnapshot(3)), "save after delete")
	requireLoad(t, s, []byte("a"), fullSnapshot(3))
}

func testList(t *testing.T, s streaming.StateStore) {
	ctx := context.Background()
	requireKeys(t, s, nil)
	var want [][]byte
	for i := range 100 {
		k := fmt.Appendf(nil, "shard-%d/sensor-%d", i%3, i)
		want = append(want, k)
		require.NoError(t, s.Save(ctx, k, fullSnapshot(i)))
	}
	require.NoError(t, s.Save(ctx, want[0], fullSnapshot(0)), "overwrite does not duplicate")
	requireKeys(t, s, want)
	keys, err := s.ListKeys(ctx)
	require.NoError(t, err)
	// The caller owns the returned slices.
	for _, k := range keys {
		for i := range k {
			k[i] = 'X'
		}
	}
	requireKeys(t, s, want)
}

func testLargeValues(t *testing.T, s streaming.StateStore) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	big := func(n int) streaming.Snapshot {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		snap := fullSnapshot(n)
		snap.Data = b
		snap.Meta.Cursor = b[:4096]
		return snap
	}
	one := big(6 << 20)
	require.NoError(t, s.Save(ctx, []byte("big"), one))
	requireLoad(t, s, []byte("big"), one)

	items := []streaming.KeyedSnapshot{
		{Key: []byte("big/1"), Snapshot: big(3 << 20)},
		{Key: []byte("big/2"), Snapshot: big(3<<20 + 1)},
		{Key: []byte("small"), Snapshot: fullSnapshot(1)},
	}
	require.NoError(t, s.SaveBatch(ctx, items))
	for _, it := range items {
		requireLoad(t, s, it.Key, it.Snapshot)
	}
}

func testNoAliasing(t *testing.T, s streaming.StateStore) {
	ctx := context.Background()
	key := []byte("alias")
	snap := fullSnapshot(5)
	want := fullSnapshot(5)
	require.NoError(t, s.Save(ctx, key, snap))
	// Scribble over everything the caller passed in.
	for i := range key {
		key[i] = 'Z'
	}
	for i := range snap.Data {
		snap.Data[i] = 0
	}
	for i := range snap.Meta.Cursor {
		snap.Meta.Cursor[i] = 0
	}
	snap.Meta.Operators[0].Node = "changed"
	requireLoad(t, s, []byte("alias"), want)

	// Scribble over everything a Load handed out: the next Load must not
	// see it (a store that copies Data but hands out the stored Cursor or
	// Operators would).
	got, err := s.Load(ctx, []byte("alias"))
	require.NoError(t, err)
	for i := range got.Data {
		got.Data[i] = 0
	}
	for i := range got.Meta.Cursor {
		got.Meta.Cursor[i] = 0
	}
	for i := range got.Meta.Operators {
		got.Meta.Operators[i].Node = "changed"
	}
	requireLoad(t, s, []byte("alias"), want)

	batch := []streaming.KeyedSnapshot{{Key: []byte("b1"), Snapshot: fullSnapshot(9)}}
	require.NoError(t, s.SaveBatch(ctx, batch))
	batch[0].Key[0] = 'Q'
	batch[0].Snapshot.Data[0] = 'Q'
	batch[0].Snapshot.Meta.Cursor[0] = 'Q'
	batch[0].Snapshot.Meta.Operators[0].Node = "changed"
	requireLoad(t, s, []byte("b1"), fullSnapshot(9))
}

func testCancelled(t *testing.T, s streaming.StateStore) {
	ctx := context.Background()
	require.NoError(t, s.Save(ctx, []byte("kept"), fullSnapshot(1)))

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	requireCancelled := func(err error, op string) {
		t.Helper()
		require.Error(t, err, "%s with a cancelled context succeeded", op)
		require.ErrorIs(t, err, context.Canceled, op)
	}
	requireCancelled(s.Save(cctx, []byte("new"), fullSnapshot(2)), "Save")
	requireCancelled(s.SaveBatch(cctx, []streaming.KeyedSnapshot{{Key: []byte("new2"), Snapshot: fullSnapshot(3)}}), "SaveBatch")
	requireCancelled(s.Delete(cctx, []byte("kept")), "Delete")
	_, err := s.Load(cctx, []byte("kept"))
	requireCancelled(err, "Load")
	_, err = s.ListKeys(cctx)
	requireCancelled(err, "ListKeys")

	// Nothing changed.
	requireNotFound(t, s, []byte("new"))
	requireNotFound(t, s, []byte("new2"))
	requireLoad(t, s, []byte("kept"), fullSnapshot(1))
	requireKeys(t, s, [][]byte{[]byte("kept")})
}

func testConcurrent(t *testing.T, s streaming.StateStore) {
	ctx := context.Background()
	const workers, rounds = 8, 30
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			fail := func(err error) { errs <- fmt.Errorf("worker %d: %w", w, err) }
			own := fmt.Appendf(nil, "w%d", w)
			for r := range rounds {
				// Own key: must always read back what this worker wrote last.
				if err := s.Save(ctx, own, fullSnapshot(w*1000+r)); err != nil {
					fail(err)
					return
				}
				got, err := s.Load(ctx, own)
				if err != nil {
					fail(err)
					return
				}
				if !bytes.Equal(got.Data, fullSnapshot(w*1000+r).Data) {
					fail(fmt.Errorf("own key read %q, wrote %q", got.Data, fullSnapshot(w*1000+r).Data))
					return
				}
				// Shared keys: every read sees some complete write.
				shared := fmt.Appendf(nil, "shared/%d", r%4)
				batch := []streaming.KeyedSnapshot{{Key: shared, Snapshot: fullSnapshot(r)}, {Key: fmt.Appendf(nil, "w%d/b%d", w, r), Snapshot: fullSnapshot(r)}}
				if err := s.SaveBatch(ctx, batch); err != nil {
					fail(err)
					return
				}
				got, err = s.Load(ctx, shared)
				if err != nil {
					fail(err)
					return
				}
				if !strings.HasPrefix(string(got.Data), "state of ") {
					fail(fmt.Errorf("shared key read a torn value %q", got.Data))
					return
				}
				if r%5 == 0 {
					if _, err := s.ListKeys(ctx); err != nil {
						fail(err)
						return
					}
					if err := s.Delete(ctx, fmt.Appendf(nil, "w%d/b%d", w, r)); err != nil {
						fail(err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var want [][]byte
	for w := range workers {
		want = append(want, fmt.Appendf(nil, "w%d", w))
		requireLoad(t, s, want[len(want)-1], fullSnapshot(w*1000+rounds-1))
		for r := range rounds {
			if r%5 != 0 {
				want = append(want, fmt.Appendf(nil, "w%d/b%d", w, r))
			}
		}
	}
	for r := range 4 {
		want = append(want, fmt.Appendf(nil, "shared/%d", r))
	}
	requireKeys(t, s, want)
}

// RunCursorStore runs the CursorStore conformance suite against stores
// made by newStore, one fresh store per subtest.
func RunCursorStore(t *testing.T, newStore func(t *testing.T) streaming.CursorStore) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s streaming.CursorStore)
	}{
		{"NotFound", testCursorNotFound},
		{"RoundTrip", testCursorRoundTrip},
		{"Fencing", testCursorFencing},
		{"Cancelled", testCursorCancelled},
		{"Concurrent", testCursorConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

func requireCursor(t *testing.T, s streaming.CursorStore, key []byte, want streaming.CursorRecord) {
	t.Helper()
	got, err := s.LoadCursor(context.Background(), key)
	require.NoError(t, err, "load cursor key %q", key)
	if len(want.Cursor) == 0 {
		want.Cursor = nil
	}
	if len(got.Cursor) == 0 {
		got.Cursor = nil
	}
	require.Equal(t, want, got, "load cursor key %q", key)
}

func testCursorNotFound(t *testing.T, s streaming.CursorStore) {
	_, err := s.LoadCursor(context.Background(), []byte("absent"))
	require.Error(t, err)
	require.ErrorIs(t, err, streaming.ErrNotFound)
	require.NoError(t, s.SaveCursor(context.Background(), []byte("a"), streaming.CursorRecord{Type: "kafka", Epoch: 1}))
	_, err = s.LoadCursor(context.Background(), []byte("A"))
	require.ErrorIs(t, err, streaming.ErrNotFound)
}

func testCursorRoundTrip(t *testing.T, s streaming.CursorStore) {
	ctx := context.Background()
	for i, k := range oddKeys() {
		rec := streaming.CursorRecord{Type: "mqtt", Cursor: fmt.Appendf(nil, "\x00pos%d\xff", i), Epoch: streaming.Epoch(i), CheckpointID: uint64(i * 10)}
		require.NoError(t, s.SaveCursor(ctx, k, rec), "save cursor %q", k)
	}
	for i, k := range oddKeys() {
		requireCursor(t, s, k, streaming.CursorRecord{Type: "mqtt", Cursor: fmt.Appendf(nil, "\x00pos%d\xff", i), Epoch: streaming.Epoch(i), CheckpointID: uint64(i * 10)})
	}
	// The store does not retain the caller's slices.
	rec := streaming.CursorRecord{Type: "kafka", Cursor: []byte("abc"), Epoch: 100, CheckpointID: 1}
	require.NoError(t, s.SaveCursor(ctx, []byte("alias"), rec))
	rec.Cursor[0] = 'Z'
	requireCursor(t, s, []byte("alias"), streaming.CursorRecord{Type: "kafka", Cursor: []byte("abc"), Epoch: 100, CheckpointID: 1})
	// Nor does it share its own with the caller of LoadCursor.
	got, err := s.LoadCursor(ctx, []byte("alias"))
	require.NoError(t, err)
	for i := range got.Cursor {
		got.Cursor[i] = 'Y'
	}
	requireCursor(t, s, []byte("alias"), streaming.CursorRecord{Type: "kafka", Cursor: []byte("abc"), Epoch: 100, CheckpointID: 1})
}

func testCursorFencing(t *testing.T, s streaming.CursorStore) {
	ctx := context.Background()
	key := []byte("shard/3")
	v := func(epoch streaming.Epoch, cp uint64) streaming.CursorRecord {
		return streaming.CursorRecord{Type: "kafka", Cursor: fmt.Appendf(nil, "e%d-c%d", epoch, cp), Epoch: epoch, CheckpointID: cp}
	}
	require.NoError(t, s.SaveCursor(ctx, key, v(5, 1)))
	require.NoError(t, s.SaveCursor(ctx, key, v(5, 2)), "same epoch advances")
	requireCursor(t, s, key, v(5, 2))

	err := s.SaveCursor(ctx, key, v(4, 3))
	require.Error(t, err, "zombie write with an older epoch succeeded")
	require.ErrorIs(t, err, streaming.ErrFenced)
	requireCursor(t, s, key, v(5, 2))

	require.NoError(t, s.SaveCursor(ctx, key, v(6, 1)), "newer epoch takes over")
	requireCursor(t, s, key, v(6, 1))
	require.ErrorIs(t, s.SaveCursor(ctx, key, v(5, 9)), streaming.ErrFenced)
	requireCursor(t, s, key, v(6, 1))

	// Fencing is per key.
	require.NoError(t, s.SaveCursor(ctx, []byte("shard/4"), v(1, 1)))
	requireCursor(t, s, []byte("shard/4"), v(1, 1))
	requireCursor(t, s, key, v(6, 1))
}

func testCursorCancelled(t *testing.T, s streaming.CursorStore) {
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, s.SaveCursor(ctx, []byte("k"), streaming.CursorRecord{Type: "kafka", Epoch: 1, CheckpointID: 1}))
	cancel()
	err := s.SaveCursor(ctx, []byte("k"), streaming.CursorRecord{Type: "kafka", Epoch: 2, CheckpointID: 2})
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.LoadCursor(ctx, []byte("k"))
	require.ErrorIs(t, err, context.Canceled)
	requireCursor(t, s, []byte("k"), streaming.CursorRecord{Type: "kafka", Epoch: 1, CheckpointID: 1})
}

// Writers racing with different epochs: whatever the interleaving, the
// stored record ends at the highest epoch, and each writer is refused only
// when a newer epoch was already stored.
func testCursorConcurrent(t *testing.T, s streaming.CursorStore) {
	ctx := context.Background()
	const writers, rounds = 8, 20
	key := []byte("contended")
	var wg sync.WaitGroup
	errs := make(chan error, writers*rounds)
	for w := range writers {
		wg.Go(func() {
			for r := range rounds {
				err := s.SaveCursor(ctx, key, streaming.CursorRecord{Type: "kafka", Epoch: streaming.Epoch(w), CheckpointID: uint64(r)})
				if err != nil && !errors.Is(err, streaming.ErrFenced) {
					errs <- err
				}
				got, err := s.LoadCursor(ctx, key)
				if err != nil {
					errs <- err
				} else if got.Epoch < streaming.Epoch(w) && r > 0 {
					errs <- fmt.Errorf("writer %d read epoch %d after its own accepted or refused write", w, got.Epoch)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	got, err := s.LoadCursor(ctx, key)
	require.NoError(t, err)
	require.Equal(t, streaming.Epoch(writers-1), got.Epoch)
}

// RunEpochClaimer runs the EpochClaimer conformance suite against
// claimers made by newClaimer, which must all claim in one store (as the
// processes sharing it would, each with its own client); each subtest
// claims under names of its own (dot-separated tokens of
// [A-Za-z0-9_=-], as the pipeline names them).
func RunEpochClaimer(t *testing.T, newClaimer func(t *testing.T) streaming.EpochClaimer) {
	t.Helper()
	ctx := context.Background()
	claim := func(c streaming.EpochClaimer, name string, atLeast streaming.Epoch) func() (streaming.Epoch, error) {
		return func() (streaming.Epoch, error) { return c.ClaimEpoch(ctx, name, atLeast) }
	}
	t.Run("AtOnce", func(t *testing.T) {
		claims := make([]func() (streaming.Epoch, error), 12)
		for i := range claims {
			claims[i] = claim(newClaimer(t), "at-once.gw-1", 5)
		}
		RequireClaimsAtOnce(t, 5, claims...)
	})
	t.Run("PastEveryClaim", func(t *testing.T) {
		a, b := newClaimer(t), newClaimer(t)
		for _, step := range []struct {
			c             streaming.EpochClaimer
			atLeast, want streaming.Epoch
		}{
			{a, 1, 1},
			{b, 1, 2},     // past a's claim
			{a, 0, 3},     // whatever the restored checkpoint says
			{b, 100, 100}, // a checkpoint restored past every claim wins over them
			{a, 7, 101},
		} {
			got, err := step.c.ClaimEpoch(ctx, "past", step.atLeast)
			require.NoError(t, err)
			require.Equal(t, step.want, got, "claim of at least %d", step.atLeast)
		}
	})
	t.Run("Names", func(t *testing.T) {
		c := newClaimer(t)
		for _, name := range []string{"names.a", "names.b", "names.a.b"} {
			got, err := c.ClaimEpoch(ctx, name, 1)
			require.NoError(t, err)
			require.Equal(t, streaming.Epoch(1), got, "a name of its own, %q, its own count", name)
		}
	})
	t.Run("LargestEpoch", func(t *testing.T) {
		// Past the largest epoch there is none: a claim must not wrap
		// around to an epoch older than the last one claimed.
		c := newClaimer(t)
		got, err := c.ClaimEpoch(ctx, "largest", math.MaxUint64)
		require.NoError(t, err)
		require.Equal(t, streaming.Epoch(math.MaxUint64), got)
		got, err = c.ClaimEpoch(ctx, "largest", 1)
		require.ErrorContains(t, err, "no epoch is past it", "claimed epoch %d", uint64(got))
		require.ErrorContains(t, err, "largest")
	})
	t.Run("Cancelled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := newClaimer(t).ClaimEpoch(cctx, "cancelled", 1)
		require.ErrorIs(t, err, context.Canceled)
	})
}

// RequireClaimsAtOnce calls every claim at once, each on a goroutine of
// its own, and requires that they got the epochs from, from+1, …, one
// each.
func RequireClaimsAtOnce(t testing.TB, from streaming.Epoch, claims ...func() (streaming.Epoch, error)) {
	t.Helper()
	got := make([]streaming.Epoch, len(claims))
	errs := make([]error, len(claims))
	var wg sync.WaitGroup
	for i, c := range claims {
		wg.Go(func() { got[i], errs[i] = c() })
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	seen := map[streaming.Epoch]bool{}
	for _, ep := range got {
		require.False(t, seen[ep], "epoch %d claimed twice (got %v)", ep, got)
		seen[ep] = true
	}
	for ep := from; ep < from+streaming.Epoch(len(claims)); ep++ {
		require.True(t, seen[ep], "epochs %d..%d, one each: missing %d (got %v)", from, from+streaming.Epoch(len(claims))-1, ep, got)
	}
}

// RunConditionalSaver runs the streaming.ConditionalSaver conformance suite:
// newWriters returns two writers on one fresh store — two handles where
// the store allows them (two Stores on one database), the same handle
// twice where it allows one (a folder's single Store).
func RunConditionalSaver(t *testing.T, newWriters func(t *testing.T) (a, b streaming.StateStore)) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, a, b streaming.StateStore)
	}{
		{"SaveIfUnchangedInterleaved", testSaveIfUnchangedInterleaved},
		{"SaveIfUnchangedFirstCommit", testSaveIfUnchangedFirstCommit},
		{"SaveIfUnchangedBatch", testSaveIfUnchangedBatch},
		{"SaveIfUnchangedConcurrent", testSaveIfUnchangedConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newWriters(t)
			tc.fn(t, a, b)
		})
	}
}

// casKey is the key the ConditionalSaver tests race for: a manifest's.
var casKey = streaming.CheckpointManifestKey("sensors/p0")

// saveIfUnchanged saves snap under key on w if key still holds read,
// and returns the item's refusal.
func saveIfUnchanged(t *testing.T, w streaming.StateStore, key []byte, read *streaming.Snapshot, snap streaming.Snapshot) error {
	t.Helper()
	cs, ok := w.(streaming.ConditionalSaver)
	require.True(t, ok, "%T is not a streaming.ConditionalSaver", w)
	refused, err := cs.SaveIfUnchanged(context.Background(), []streaming.ConditionalSave{
		{KeyedSnapshot: streaming.KeyedSnapshot{Key: key, Snapshot: snap}, Read: read},
	})
	require.NoError(t, err)
	require.Len(t, refused, 1)
	return refused[0]
}

// A loads the manifest, B loads it and saves a newer one, A saves: A is
// refused and B's manifest stays.
func testSaveIfUnchangedInterleaved(t *testing.T, a, b streaming.StateStore) {
	ctx := context.Background()
	require.NoError(t, a.Save(ctx, casKey, fullSnapshot(1)))
	readA, err := a.Load(ctx, casKey)
	require.NoError(t, err)
	readB, err := b.Load(ctx, casKey)
	require.NoError(t, err)
	require.NoError(t, saveIfUnchanged(t, b, casKey, &readB, fullSnapshot(3)))
	err = saveIfUnchanged(t, a, casKey, &readA, fullSnapshot(2))
	require.ErrorIs(t, err, streaming.ErrConflict)
	require.Contains(t, err.Error(), string(casKey))
	requireLoad(t, a, casKey, fullSnapshot(3))
	requireLoad(t, b, casKey, fullSnapshot(3))
}

// Both find no manifest; B commits first: A, expecting none, is refused.
func testSaveIfUnchangedFirstCommit(t *testing.T, a, b streaming.StateStore) {
	require.NoError(t, saveIfUnchanged(t, b, casKey, nil, fullSnapshot(3)))
	require.ErrorIs(t, saveIfUnchanged(t, a, casKey, nil, fullSnapshot(2)), streaming.ErrConflict)
	requireLoad(t, a, casKey, fullSnapshot(3))
}

// In a batch only the items whose key changed are refused.
func testSaveIfUnchangedBatch(t *testing.T, a, b streaming.StateStore) {
	ctx := context.Background()
	other := streaming.CheckpointManifestKey("sensors/p1")
	require.NoError(t, a.SaveBatch(ctx, []streaming.KeyedSnapshot{{Key: casKey, Snapshot: fullSnapshot(1)}, {Key: other, Snapshot: fullSnapshot(1)}}))
	read := fullSnapshot(1)
	require.NoError(t, saveIfUnchanged(t, b, casKey, &read, fullSnapshot(3)))
	refused, err := a.(streaming.ConditionalSaver).SaveIfUnchanged(ctx, []streaming.ConditionalSave{
		{KeyedSnapshot: streaming.KeyedSnapshot{Key: casKey, Snapshot: fullSnapshot(2)}, Read: &read},
		{KeyedSnapshot: streaming.KeyedSnapshot{Key: other, Snapshot: fullSnapshot(2)}, Read: &read},
	})
	require.NoError(t, err)
	require.Len(t, refused, 2)
	require.ErrorIs(t, refused[0], streaming.ErrConflict)
	require.NoError(t, refused[1])
	requireLoad(t, a, casKey, fullSnapshot(3))
	requireLoad(t, a, other, fullSnapshot(2))
}

// Of writers that all read the same manifest, exactly one replaces it.
func testSaveIfUnchangedConcurrent(t *testing.T, a, b streaming.StateStore) {
	ctx := context.Background()
	require.NoError(t, a.Save(ctx, casKey, fullSnapshot(0)))
	read, err := a.Load(ctx, casKey)
	require.NoError(t, err)
	const writers = 8
	refused := make([]error, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			cs := []streaming.StateStore{a, b}[w%2].(streaming.ConditionalSaver)
			r, err := cs.SaveIfUnchanged(ctx, []streaming.ConditionalSave{
				{KeyedSnapshot: streaming.KeyedSnapshot{Key: casKey, Snapshot: fullSnapshot(w + 1)}, Read: &read},
			})
			if err == nil {
				err = r[0]
			}
			refused[w] = err
		})
	}
	wg.Wait()
	winner := -1
	for w, err := range refused {
		if err == nil {
			require.Equal(t, -1, winner, "writers %d and %d both replaced the manifest they read", winner, w)
			winner = w
			continue
		}
		require.ErrorIs(t, err, streaming.ErrConflict, "writer %d", w)
	}
	require.NotEqual(t, -1, winner, "no writer replaced the manifest")
	requireLoad(t, a, casKey, fullSnapshot(winner+1))
}
