package s3_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/stretchr/testify/require"

	s3store "github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/streaming"
)

func TestStoreRoundTripKeys(t *testing.T) {
	f := newFakeS3(t)
	st, _ := f.store(t, s3store.WithPrefix("shard-1"))
	ctx := context.Background()
	cases := []struct {
		name string
		key  []byte
	}{
		{"plain", []byte("sensor-1")},
		{"slashes", []byte("a/b/../c/")},
		{"dots", []byte("..")},
		{"binary", []byte{0, 0xff, '\n', 0x80}},
		{"empty", []byte{}},
		{"unicode", []byte("capteur-é-温度")},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want := snap(i, 1)
			require.NoError(t, st.Save(ctx, tc.key, want))
			got, err := st.Load(ctx, tc.key)
			require.NoError(t, err)
			require.Equal(t, want, got)

			// A fresh Store (another process) reads the same bytes.
			other, _ := f.store(t, s3store.WithPrefix("shard-1"))
			got, err = other.Load(ctx, tc.key)
			require.NoError(t, err)
			require.Equal(t, want, got)
		})
	}
	keys, err := st.ListKeys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, len(cases))
	for _, tc := range cases {
		require.True(t, slices.ContainsFunc(keys, func(k []byte) bool { return bytes.Equal(k, tc.key) }), "key %q listed", tc.key)
	}
	for _, name := range f.objectNames(t, "") {
		require.True(t, strings.HasPrefix(name, "shard-1/"), "object %q outside the prefix", name)
	}
}

func TestStoreOverwriteDeleteNotFound(t *testing.T) {
	f := newFakeS3(t)
	st, _ := f.store(t)
	ctx := context.Background()

	_, err := st.Load(ctx, []byte("nope"))
	require.ErrorIs(t, err, streaming.ErrNotFound)
	require.Contains(t, err.Error(), `"nope"`)

	require.NoError(t, st.Save(ctx, []byte("k"), snap(1, 1)))
	require.NoError(t, st.Save(ctx, []byte("k"), snap(1, 2)))
	got, err := st.Load(ctx, []byte("k"))
	require.NoError(t, err)
	require.Equal(t, snap(1, 2), got)

	require.NoError(t, st.Delete(ctx, []byte("k")))
	require.NoError(t, st.Delete(ctx, []byte("k")), "deleting an absent key is not an error")
	_, err = st.Load(ctx, []byte("k"))
	require.ErrorIs(t, err, streaming.ErrNotFound)

	reopened, _ := f.store(t)
	_, err = reopened.Load(ctx, []byte("k"))
	require.ErrorIs(t, err, streaming.ErrNotFound)
	// Both segments held only "k": both are gone from the bucket.
	require.Empty(t, f.objectNames(t, "seg/"))
}

func TestSaveBatchLaterDuplicateWins(t *testing.T) {
	f := newFakeS3(t)
	st, _ := f.store(t)
	ctx := context.Background()
	items := []streaming.KeyedSnapshot{
		{Key: []byte("a"), Snapshot: snap(1, 1)},
		{Key: []byte("b"), Snapshot: snap(2, 1)},
		{Key: []byte("a"), Snapshot: snap(3, 1)},
	}
	require.NoError(t, st.SaveBatch(ctx, items))
	got, err := st.Load(ctx, []byte("a"))
	require.NoError(t, err)
	require.Equal(t, snap(3, 1), got)
	stats, err := st.Stats(ctx)
	require.NoError(t, err)
	require.Less(t, stats.LiveBytes, stats.RecordBytes, "the overridden item is a dead record")
	require.NoError(t, st.Compact(ctx))
	stats, err = st.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, stats.RecordBytes, stats.LiveBytes, "compaction dropped the dead record")
	got, err = st.Load(ctx, []byte("a"))
	require.NoError(t, err)
	require.Equal(t, snap(3, 1), got)
}

// TestRequestCosts is the cost contract: saving a batch of 10,000
// keys costs at most 2 PUTs, and loading one key costs at most 2 GETs even
// from a cold store.
func TestRequestCosts(t *testing.T) {
	f := newFakeS3(t)
	ctx := context.Background()
	st, rc := f.store(t)
	items := batch(10_000, 1)
	require.NoError(t, st.SaveBatch(ctx, items))
	t.Logf("SaveBatch of 10,000 keys: %v, %d body bytes", rc.Counts(), rc.BytesSent())
	require.LessOrEqual(t, rc.Count("PutObject"), int64(2), "PUTs for a 10,000-key batch: %v", rc.Counts())
	require.Positive(t, rc.Count("PutObject"))

	cold, rc2 := f.store(t)
	got, err := cold.Load(ctx, items[4321].Key)
	require.NoError(t, err)
	require.Equal(t, items[4321].Snapshot, got)
	t.Logf("cold Load of one key: %v", rc2.Counts())
	require.LessOrEqual(t, rc2.Count("GetObject"), int64(2), "GETs for a cold load: %v", rc2.Counts())
	require.Equal(t, int64(0), rc2.Count("PutObject"))

	rc2.Reset()
	got, err = cold.Load(ctx, items[9999].Key)
	require.NoError(t, err)
	require.Equal(t, items[9999].Snapshot, got)
	require.Equal(t, int64(1), rc2.Count("GetObject"), "a warm load is one ranged GET: %v", rc2.Counts())

	// A second batch over the same keys still costs 2 PUTs, and the first
	// segment, now entirely dead, goes with one DeleteObjects.
	rc.Reset()
	require.NoError(t, st.SaveBatch(ctx, batch(10_000, 2)))
	require.LessOrEqual(t, rc.Count("PutObject"), int64(2), "%v", rc.Counts())
	require.Equal(t, int64(1), rc.Count("DeleteObjects"), "%v", rc.Counts())
	require.Len(t, f.objectNames(t, "seg/"), 1)
}

func TestDeleteKeysOneCommit(t *testing.T) {
	f := newFakeS3(t)
	ctx := context.Background()
	st, rc := f.store(t)
	first := batch(500, 1)
	require.NoError(t, st.SaveBatch(ctx, first))
	second := []streaming.KeyedSnapshot{{Key: []byte("other"), Snapshot: snap(7, 1)}}
	require.NoError(t, st.SaveBatch(ctx, second))
	require.Len(t, f.objectNames(t, "seg/"), 2)

	keys := make([][]byte, len(first))
	for i, it := range first {
		keys[i] = it.Key
	}
	rc.Reset()
	require.NoError(t, st.DeleteKeys(ctx, keys))
	require.Equal(t, map[string]int64{"PutObject": 1, "DeleteObjects": 1}, rc.Counts())
	require.Len(t, f.objectNames(t, "seg/"), 1, "the emptied segment is deleted")

	left, err := st.ListKeys(ctx)
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("other")}, left)
}

func TestCompactionReclaimsDeadBytes(t *testing.T) {
	f := newFakeS3(t)
	ctx := context.Background()
	st, rc := f.store(t, s3store.WithCompaction(0.5, 1))
	// Ten batches, each overwriting a fifth of 1000 keys: segments keep
	// 80% dead records until compaction folds them into a new segment.
	require.NoError(t, st.SaveBatch(ctx, batch(1000, 0)))
	want := map[string]streaming.Snapshot{}
	for _, it := range batch(1000, 0) {
		want[string(it.Key)] = it.Snapshot
	}
	for g := 1; g <= 10; g++ {
		items := batch(1000, g)[(g%5)*200 : (g%5)*200+200]
		for _, it := range items {
			want[string(it.Key)] = it.Snapshot
		}
		require.NoError(t, st.SaveBatch(ctx, items))
		stats, err := st.Stats(ctx)
		require.NoError(t, err)
		dead := stats.RecordBytes - stats.LiveBytes
		require.LessOrEqual(t, float64(dead), 0.5*float64(stats.RecordBytes), "after batch %d: %+v", g, stats)
	}
	require.Positive(t, rc.Count("GetObject"), "compaction read victim segments")
	stats, err := st.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 1000, stats.Keys)
	require.Len(t, f.objectNames(t, "seg/"), stats.Segments, "no garbage segments left")

	cold, _ := f.store(t)
	for k, s := range want {
		got, err := cold.Load(ctx, []byte(k))
		require.NoError(t, err)
		require.Equal(t, s, got, "key %s", k)
	}

	// Compact folds everything with dead bytes into one segment.
	require.NoError(t, st.Compact(ctx))
	stats, err = st.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, stats.RecordBytes, stats.LiveBytes)
}

// failRequest makes the client fail, before sending, every request that
// match selects: to the bucket this looks exactly like a crash of the
// writer just before that request.
func failRequest(match func(op string, params any) bool) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("test/failRequest",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				if match(middleware.GetOperationName(ctx), in.Parameters) {
					return middleware.InitializeOutput{}, middleware.Metadata{}, errors.New("injected crash")
				}
				return next.HandleInitialize(ctx, in)
			}), middleware.Before)
	}
}

func putOf(suffix string) func(string, any) bool {
	return func(op string, params any) bool {
		p, ok := params.(*awss3.PutObjectInput)
		return ok && op == "PutObject" && strings.Contains(aws.ToString(p.Key), suffix)
	}
}

// TestCrashBetweenRequests walks the crash-safety argument of the package
// documentation: a crash before any request of a commit leaves a state
// that is either the previous commit or the new one, never a mix, and at
// worst garbage that Compact sweeps. It runs for keys of no shard (the
// root manifest) and for a shard's keys (their own manifest and segments
// below shards/).
func TestCrashBetweenRequests(t *testing.T) {
	layouts := []struct {
		name   string
		items  func(n, g int) []streaming.KeyedSnapshot
		key    func(i int) []byte
		segDir string
	}{
		{"root", batch, func(i int) []byte { return fmt.Appendf(nil, "sensor/%06d", i) }, "seg/"},
		{"shard", shardBatch, shardKey, "shards/s-kafka%2Fcentral%2Freadings%2F0/seg/"},
	}
	cases := []struct {
		name        string
		crashBefore func(string, any) bool
		committed   bool // the new batch is in force after the crash
		segments    int  // segment objects in the bucket after the crash
	}{
		{"segment PUT", putOf("seg/"), false, 1},
		{"manifest PUT", putOf("manifest"), false, 2},
		{"DeleteObjects", func(op string, _ any) bool { return op == "DeleteObjects" }, true, 2},
	}
	for _, ly := range layouts {
		for _, tc := range cases {
			t.Run(ly.name+"/"+tc.name, func(t *testing.T) {
				f := newFakeS3(t)
				ctx := context.Background()
				st, _ := f.store(t)
				require.NoError(t, st.SaveBatch(ctx, ly.items(100, 1)))

				crashing, _ := f.store(t, s3store.WithAPIOptions(failRequest(tc.crashBefore)))
				err := crashing.SaveBatch(ctx, ly.items(100, 2))
				if tc.committed {
					require.NoError(t, err, "the commit point was passed; the failed delete is only logged")
				} else {
					require.ErrorContains(t, err, "injected crash")
				}
				require.Len(t, f.objectNames(t, ly.segDir), tc.segments)
				require.Len(t, f.objectNames(t, ""), tc.segments+1, "the segments and one manifest: %v", f.objectNames(t, ""))

				gen := 1
				if tc.committed {
					gen = 2
				}
				after, _ := f.store(t)
				for _, it := range ly.items(100, gen) {
					got, err := after.Load(ctx, it.Key)
					require.NoError(t, err)
					require.Equal(t, it.Snapshot, got)
				}
				// The next commit and a Compact sweep whatever the crash left
				// (Compact only sweeps up to the committed generation, so a
				// segment of a commit in flight elsewhere is never taken).
				require.NoError(t, after.SaveBatch(ctx, ly.items(1, gen)))
				require.NoError(t, after.Compact(ctx))
				stats, err := after.Stats(ctx)
				require.NoError(t, err)
				require.Len(t, f.objectNames(t, ly.segDir), stats.Segments, "every segment object is named by the manifest")
				got, err := after.Load(ctx, ly.key(42))
				require.NoError(t, err)
				require.Equal(t, snap(42, gen), got)
			})
		}
	}
}

// A writer whose cached manifest is stale loses its commit with
// ErrConflict and changes nothing. The conflict alone does not say which
// writer is the zombie (the rightful owner may be the one that lost the
// race), so it is not ErrFenced: the caller retries, rereading the
// manifest, and epochs decide (WithEpochFencing here; the checkpointer's
// own manifest check for checkpoints).
func TestSecondWriterLosesWithConflict(t *testing.T) {
	f := newFakeS3(t)
	ctx := context.Background()
	owner, _ := f.store(t, s3store.WithEpochFencing(true))
	zombie, _ := f.store(t, s3store.WithEpochFencing(true))
	require.NoError(t, zombie.SaveBatch(ctx, batch(10, 1))) // the zombie was the owner
	require.NoError(t, owner.SaveBatch(ctx, batch(10, 2)))  // the new owner reads it and commits
	err := zombie.SaveBatch(ctx, batch(10, 1))              // the zombie's stale commit
	require.ErrorIs(t, err, s3store.ErrConflict)
	require.NotErrorIs(t, err, streaming.ErrFenced)
	require.Contains(t, err.Error(), "s3://"+testBucket+"/manifest")

	check, _ := f.store(t)
	got, err := check.Load(ctx, []byte("sensor/000003"))
	require.NoError(t, err)
	require.Equal(t, snap(3, 2), got, "the zombie's write changed nothing")

	// Its retry reads the owner's manifest and is fenced by the epoch.
	err = zombie.SaveBatch(ctx, batch(10, 1))
	require.ErrorIs(t, err, streaming.ErrFenced)
	got, err = check.Load(ctx, []byte("sensor/000003"))
	require.NoError(t, err)
	require.Equal(t, snap(3, 2), got, "the zombie's retry changed nothing")
}

func TestEpochFencing(t *testing.T) {
	f := newFakeS3(t)
	ctx := context.Background()
	st, _ := f.store(t, s3store.WithEpochFencing(true))
	require.NoError(t, st.SaveBatch(ctx, batch(5, 4)))
	err := st.SaveBatch(ctx, batch(5, 3))
	require.ErrorIs(t, err, streaming.ErrFenced)
	require.ErrorContains(t, err, "epoch 3 is older than the committed epoch 4")
	require.ErrorContains(t, err, `snapshot key "sensor/000000" at epoch 3`, "the key quoted once")
	require.NoError(t, st.SaveBatch(ctx, batch(5, 4)), "the same epoch may write again")

	reopened, _ := f.store(t, s3store.WithEpochFencing(true))
	stats, err := reopened.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(4), stats.Epoch)
	require.ErrorIs(t, reopened.SaveBatch(ctx, batch(1, 2)), streaming.ErrFenced)
}

// Without conditional writes (a server without If-Match support) a
// commit cannot be made atomic, but the epoch check of WithEpochFencing
// still ran against the manifest this Store had cached from its own last
// commit: a zombie owner replaced the new owner's manifest of a newer
// epoch long after it was written, and every key the zombie's batch did
// not hold was gone. A commit now rereads the manifest in that mode.
func TestEpochFencingWithoutConditionalWritesRefusesAZombie(t *testing.T) {
	f := newFakeS3(t)
	ctx := context.Background()
	zombie, _ := f.store(t, s3store.WithEpochFencing(true), s3store.WithConditionalWrites(false))
	owner, _ := f.store(t, s3store.WithEpochFencing(true), s3store.WithConditionalWrites(false))
	require.NoError(t, zombie.SaveBatch(ctx, batch(5, 1)))
	require.NoError(t, owner.SaveBatch(ctx, batch(10, 2)))

	err := zombie.SaveBatch(ctx, batch(5, 1))
	require.ErrorIs(t, err, streaming.ErrFenced)
	require.ErrorContains(t, err, "epoch 1 is older than the committed epoch 2")
	check, _ := f.store(t)
	for _, it := range batch(10, 2) {
		got, err := check.Load(ctx, it.Key)
		require.NoError(t, err)
		require.Equal(t, it.Snapshot, got, "the zombie's save changed nothing")
	}
}

func TestCorruptObjectsAreRefusedByName(t *testing.T) {
	f := newFakeS3(t)
	ctx := context.Background()
	st, _ := f.store(t, s3store.WithPrefix("p"))
	require.NoError(t, st.SaveBatch(ctx, batch(3, 1)))

	t.Run("segment", func(t *testing.T) {
		seg := f.objectNames(t, "p/seg/")[0]
		body := f.getObject(t, seg)
		bad := bytes.Clone(body)
		i := bytes.Index(bad, []byte("state 1/1"))
		require.Positive(t, i)
		bad[i] ^= 0x20
		f.putObject(t, seg, bad)
		_, err := st.Load(ctx, []byte("sensor/000001"))
		require.ErrorIs(t, err, streaming.ErrCorrupt)
		require.ErrorContains(t, err, `snapshot key "sensor/000001"`)
		require.ErrorContains(t, err, "s3://"+testBucket+"/"+seg)
		f.putObject(t, seg, body)
	})
	t.Run("manifest", func(t *testing.T) {
		body := f.getObject(t, "p/manifest")
		bad := bytes.Clone(body)
		bad[len(bad)/2] ^= 1
		f.putObject(t, "p/manifest", bad)
		cold, _ := f.store(t, s3store.WithPrefix("p"))
		_, err := cold.Load(ctx, []byte("sensor/000001"))
		require.ErrorIs(t, err, streaming.ErrCorrupt)
		require.ErrorContains(t, err, "s3://"+testBucket+"/p/manifest")
	})
}

func TestCanceledContext(t *testing.T) {
	f := newFakeS3(t)
	st, rc := f.store(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, st.SaveBatch(ctx, batch(3, 1)), context.Canceled)
	_, err := st.Load(ctx, []byte("x"))
	require.ErrorIs(t, err, context.Canceled)
	_, err = st.ListKeys(ctx)
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, rc.Counts(), "nothing was sent")
}

func TestNoSuchBucket(t *testing.T) {
	f := newFakeS3(t)
	st, err := s3store.New(context.Background(), "absent-bucket", f.opts()...)
	require.NoError(t, err)
	_, err = st.Load(context.Background(), []byte("k"))
	require.ErrorIs(t, err, s3store.ErrNoSuchBucket)
	require.ErrorContains(t, err, "s3://absent-bucket/manifest")
	require.ErrorContains(t, err, f.URL)
}

func TestOptionValidation(t *testing.T) {
	cases := []struct {
		name   string
		bucket string
		opts   []s3store.Option
		want   string
	}{
		{"empty bucket", "", nil, "bucket name is empty"},
		{"bad endpoint", "b", []s3store.Option{s3store.WithEndpoint("127.0.0.1:9000")}, "not an http:// or https:// URL"},
		{"half credentials", "b", []s3store.Option{s3store.WithStaticCredentials("AK", "", "")}, "both an access key and a secret"},
		// A session token alone used to be dropped, the standard chain's
		// credentials used instead.
		{"token without keys", "b", []s3store.Option{s3store.WithStaticCredentials("", "", "token")}, "session token need an access key and a secret"},
		{"ratio", "b", []s3store.Option{s3store.WithCompaction(1.5, 0)}, "compaction ratio 1.5"},
		{"max segments", "b", []s3store.Option{s3store.WithMaxSegments(1)}, "max segments 1"},
		{"client and endpoint", "b", []s3store.Option{s3store.WithClient(awss3.New(awss3.Options{})), s3store.WithEndpoint("http://x")}, "WithClient cannot be combined"},
		{"bad CA", "b", []s3store.Option{s3store.WithCACert([]byte("not pem"))}, "no PEM certificate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s3store.New(context.Background(), tc.bucket, append(tc.opts, s3store.WithRegion("us-east-1"))...)
			require.ErrorContains(t, err, tc.want)
		})
	}
}

func TestMaxSegmentsBoundsManySmallSaves(t *testing.T) {
	f := newFakeS3(t)
	ctx := context.Background()
	st, _ := f.store(t, s3store.WithMaxSegments(8))
	for i := range 40 {
		require.NoError(t, st.Save(ctx, fmt.Appendf(nil, "k%02d", i), snap(i, 1)))
		stats, err := st.Stats(ctx)
		require.NoError(t, err)
		require.LessOrEqual(t, stats.Segments, 8, "after save %d", i)
		require.Equal(t, i+1, stats.Keys)
	}
	stats, err := st.Stats(ctx)
	require.NoError(t, err)
	require.Len(t, f.objectNames(t, "seg/"), stats.Segments, "folded segments are deleted")
	cold, _ := f.store(t)
	for i := range 40 {
		got, err := cold.Load(ctx, fmt.Appendf(nil, "k%02d", i))
		require.NoError(t, err)
		require.Equal(t, snap(i, 1), got)
	}
}

// A reader in another process holds a manifest whose segment the writer
// has since replaced and deleted: Load rereads the manifest once and
// returns the new value.
func TestReaderRereadsManifestAfterSegmentDeleted(t *testing.T) {
	f := newFakeS3(t)
	ctx := context.Background()
	writer, _ := f.store(t)
	require.NoError(t, writer.SaveBatch(ctx, batch(50, 1)))
	reader, rc := f.store(t)
	got, err := reader.Load(ctx, []byte("sensor/000010"))
	require.NoError(t, err)
	require.Equal(t, snap(10, 1), got)

	require.NoError(t, writer.SaveBatch(ctx, batch(50, 2))) // the old segment is now deleted
	rc.Reset()
	got, err = reader.Load(ctx, []byte("sensor/000010"))
	require.NoError(t, err)
	require.Equal(t, snap(10, 2), got)
	require.Equal(t, int64(3), rc.Count("GetObject"), "404 on the old segment, the manifest, the record: %v", rc.Counts())
}

func TestScanYieldsLiveSnapshotsOneGetPerSegment(t *testing.T) {
	f := newFakeS3(t)
	ctx := context.Background()
	st, _ := f.store(t, s3store.WithCompaction(0, 0))
	want := map[string]streaming.Snapshot{}
	for g := 1; g <= 3; g++ {
		items := batch(300, g)[(g-1)*100:] // each batch overwrites part of the previous one
		require.NoError(t, st.SaveBatch(ctx, items))
		for _, it := range items {
			want[string(it.Key)] = it.Snapshot
		}
	}
	require.NoError(t, st.DeleteKeys(ctx, [][]byte{[]byte("sensor/000250"), []byte("sensor/000001")}))
	delete(want, "sensor/000250")
	delete(want, "sensor/000001")

	cold, rc := f.store(t)
	got := map[string]streaming.Snapshot{}
	require.NoError(t, cold.Scan(ctx, func(key []byte, s streaming.Snapshot) error {
		_, dup := got[string(key)]
		require.False(t, dup, "key %q yielded twice", key)
		got[string(key)] = s
		return nil
	}))
	require.Equal(t, want, got)
	stats, err := cold.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1+stats.Segments), rc.Count("GetObject"), "the manifest and one GET per segment: %v", rc.Counts())

	stop := errors.New("stop")
	n := 0
	require.ErrorIs(t, cold.Scan(ctx, func([]byte, streaming.Snapshot) error { n++; return stop }), stop)
	require.Equal(t, 1, n)
}

func TestManifestCompressionEitherWay(t *testing.T) {
	cases := []struct {
		name        string
		write, read bool
	}{
		{"compressed read by compressed", true, true},
		{"plain read by compressing store", false, true},
		{"compressed read by plain store", true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeS3(t)
			ctx := context.Background()
			w, _ := f.store(t, s3store.WithManifestCompression(tc.write))
			require.NoError(t, w.SaveBatch(ctx, batch(2000, 1)))
			size := len(f.getObject(t, "manifest"))
			r, _ := f.store(t, s3store.WithManifestCompression(tc.read))
			got, err := r.Load(ctx, []byte("sensor/001234"))
			require.NoError(t, err)
			require.Equal(t, snap(1234, 1), got)
			require.NoError(t, r.SaveBatch(ctx, batch(10, 2)))
			got, err = w.Load(ctx, []byte("sensor/001234"))
			require.NoError(t, err)
			require.Equal(t, snap(1234, 1), got)
			t.Logf("manifest of 2000 keys: %d bytes (compressed: %v)", size, tc.write)
		})
	}
}

// loseReply sends every attempt of a PUT of an object whose name ends in
// suffix to the server and, for the first attempt of each (odd-numbered
// ones), reports a connection error instead of the server's reply, as
// when a connection drops after the server wrote the object: the SDK
// retries the same request.
func loseReply(suffix string) func(*middleware.Stack) error {
	var mu sync.Mutex
	attempts := 0
	return func(stack *middleware.Stack) error {
		return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("test/loseReply",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleFinalize(ctx, in)
				req, ok := in.Request.(*smithyhttp.Request)
				if !ok || req.Method != http.MethodPut || !strings.HasSuffix(req.URL.Path, suffix) {
					return out, md, err
				}
				mu.Lock()
				attempts++
				lose := attempts%2 == 1
				mu.Unlock()
				if lose && err == nil {
					return middleware.FinalizeOutput{}, md, &smithyhttp.RequestSendError{Err: errors.New("injected lost reply")}
				}
				return out, md, err
			}), middleware.After)
	}
}

// A manifest PUT that lands but whose reply is lost is retried by the SDK,
// and the retry is refused (412) by the very write it repeats. That is
// the commit succeeding, not another writer: SaveBatch returned
// ErrConflict ("refused and changed nothing") for a batch that was
// committed. The first commit (If-None-Match "*") and a later one
// (If-Match) both succeed now, and the next commit needs no reread.
func TestManifestPutWhoseReplyIsLostCommits(t *testing.T) {
	f := newFakeS3(t)
	ctx := context.Background()
	st, rc := f.store(t, s3store.WithAPIOptions(loseReply("/manifest")))
	for g := 1; g <= 3; g++ {
		require.NoError(t, st.SaveBatch(ctx, batch(10, g)), "commit %d", g)
		got, err := st.Load(ctx, []byte("sensor/000003"))
		require.NoError(t, err)
		require.Equal(t, snap(3, g), got)
	}
	require.Equal(t, int64(6), rc.Count("PutObject")-3, "each manifest PUT sent twice: %v", rc.Counts())
	check, _ := f.store(t)
	got, err := check.Load(ctx, []byte("sensor/000003"))
	require.NoError(t, err)
	require.Equal(t, snap(3, 3), got)
}

// A server without conditional PUTs (AWS S3 before 2024, some
// S3-compatible servers) answers a PUT with If-Match or If-None-Match
// with 501 NotImplemented. The error was the server's bare "a header you
// provided implies functionality that is not implemented": it now says
// the server does not support conditional writes, names the option, and
// wraps errors.ErrUnsupported, for a commit, a cursor save and an epoch
// claim alike.
func TestServerWithoutConditionalWritesIsNamed(t *testing.T) {
	f := newFakeS3Behind(t, func(fake http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut && (r.Header.Get("If-Match") != "" || r.Header.Get("If-None-Match") != "") {
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(http.StatusNotImplemented)
				fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>NotImplemented</Code><Message>A header you provided implies functionality that is not implemented</Message></Error>`)
				return
			}
			fake.ServeHTTP(w, r)
		})
	})
	ctx := context.Background()
	check := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, errors.ErrUnsupported)
		require.ErrorContains(t, err, "does not support conditional writes")
		require.ErrorContains(t, err, "WithConditionalWrites(false)")
		require.ErrorContains(t, err, "s3://"+testBucket+"/")
	}
	st, _ := f.store(t)
	check(st.SaveBatch(ctx, batch(3, 1)))
	_, err := st.ClaimEpoch(ctx, "run", 1)
	check(err)
	cs, err := s3store.NewCursorStore(ctx, testBucket, f.opts()...)
	require.NoError(t, err)
	check(cs.SaveCursor(ctx, []byte("k"), streaming.CursorRecord{Type: "kafka", Epoch: 1}))

	unconditional, _ := f.store(t, s3store.WithConditionalWrites(false))
	require.NoError(t, unconditional.SaveBatch(ctx, batch(3, 1)), "the option the error names works")
}

// Finding the shards' manifests listed every object below shards/, every
// segment of every shard included: one LIST per 1000 segments (a shared
// prefix of 100 shards at the 256-segment bound: 26 LISTs) where the
// package documents one. The shard folders are listed now (a delimiter),
// one LIST per 1000 shards.
func TestShardManifestsFoundWithOneList(t *testing.T) {
	f := newFakeS3(t)
	ctx := context.Background()
	st, _ := f.store(t)
	items := shardBatch(3, 1)
	for i := range 3 {
		items = append(items, streaming.KeyedSnapshot{Key: []byte(streaming.CheckpointPieceKey("kafka/central/readings/1", 1, 1, i)), Snapshot: snap(i, 1)})
	}
	require.NoError(t, st.SaveBatch(ctx, items))
	for i := range 1001 { // segments of commits to come (or of crashed ones)
		f.putObject(t, fmt.Sprintf("shards/s-kafka%%2Fcentral%%2Freadings%%2F0/seg/%020d-%08x.seg", 100+i, i), []byte("x"))
	}

	cold, rc := f.store(t)
	keys, err := cold.ListKeys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 6)
	require.Equal(t, int64(1), rc.Count("ListObjectsV2"), "%v", rc.Counts())
	stats, err := cold.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, stats.Shards)
	n := 0
	require.NoError(t, cold.Scan(ctx, func([]byte, streaming.Snapshot) error { n++; return nil }))
	require.Equal(t, 6, n)
}

// AWS S3 answers a conditional PUT that races another write of the same
// object with 409 ConditionalRequestConflict (and documents: reread and
// retry), not only with 412. That was a plain error: an epoch claim of
// two runs started at once, or a cursor save, failed instead of rereading
// and retrying, and a commit that lost the race did not wrap ErrConflict,
// so callers did not retry it. Now a 409 is handled as a lost race.
func TestConditionalRequestConflictIsALostRace(t *testing.T) {
	var mu sync.Mutex
	conflicted := map[string]bool{}
	f := newFakeS3Behind(t, func(fake http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPut && (r.Header.Get("If-Match") != "" || r.Header.Get("If-None-Match") != "") {
				mu.Lock()
				first := !conflicted[r.URL.Path]
				conflicted[r.URL.Path] = true
				mu.Unlock()
				if first {
					w.Header().Set("Content-Type", "application/xml")
					w.WriteHeader(http.StatusConflict)
					fmt.Fprint(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>ConditionalRequestConflict</Code><Message>A conflicting conditional operation is currently in progress against this resource. Please try again.</Message></Error>`)
					return
				}
			}
			fake.ServeHTTP(w, r)
		})
	})
	ctx := context.Background()

	st, _ := f.store(t)
	err := st.SaveBatch(ctx, batch(3, 1))
	require.ErrorIs(t, err, s3store.ErrConflict)
	require.NoError(t, st.SaveBatch(ctx, batch(3, 1)), "the retry commits")

	epoch, err := st.ClaimEpoch(ctx, "run", 1)
	require.NoError(t, err)
	require.Equal(t, streaming.Epoch(1), epoch)

	cs, err := s3store.NewCursorStore(ctx, testBucket, f.opts()...)
	require.NoError(t, err)
	require.NoError(t, cs.SaveCursor(ctx, []byte("k"), streaming.CursorRecord{Type: "kafka", Epoch: 1}))
}
