package s3_test

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	s3store "github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/streaming"
)

// hostileSetup saves three keys under prefix p and returns the name of
// their segment (relative to the prefix) and its size.
func hostileSetup(t *testing.T, f *fakeS3) (seg string, size uint64) {
	t.Helper()
	st, _ := f.store(t, s3store.WithPrefix("p"))
	require.NoError(t, st.SaveBatch(context.Background(), batch(3, 1)))
	segs := f.objectNames(t, "p/seg/")
	require.Len(t, segs, 1)
	return strings.TrimPrefix(segs[0], "p/"), uint64(len(f.getObject(t, segs[0])))
}

// TestHostileManifestSizes is issue 17.9: the manifest is trusted, so a
// segment or record size written into it by anyone with write access to
// the bucket drove make([]byte, n) — "makeslice: len out of range" for a
// huge one, gigabytes allocated for a merely large one. Sizes are now
// bounded when the manifest is decoded, and a ranged GET's ContentLength
// is checked before anything is allocated.
func TestHostileManifestSizes(t *testing.T) {
	cases := []struct {
		name       string
		size, data uint64 // the segment as the manifest names it
		off, n     uint64 // key sensor/000001's record
		want       string
	}{
		{"size past int64", 1 << 62, 1 << 62, 0, 1 << 61, "record"},
		{"record of 3 GiB in a small segment", 3 << 30, 3 << 30, 0, 3<<30 - 1, "bytes"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeS3(t)
			seg, _ := hostileSetup(t, f)
			f.putObject(t, "p/manifest", s3store.CraftManifest(9,
				[]s3store.CraftedSegment{{Name: seg, Size: tc.size, Data: tc.data}},
				map[string]s3store.CraftedLoc{"sensor/000001": {Seg: seg, Off: tc.off, N: tc.n}}))
			cold, _ := f.store(t, s3store.WithPrefix("p"))
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := cold.Load(context.Background(), []byte("sensor/000001"))
			runtime.ReadMemStats(&after)
			require.ErrorIs(t, err, streaming.ErrCorrupt)
			require.ErrorContains(t, err, "s3://"+testBucket+"/p/")
			require.ErrorContains(t, err, tc.want)
			require.Less(t, after.TotalAlloc-before.TotalAlloc, uint64(64<<20), "bytes allocated for a record the manifest lies about")
		})
	}
}

// TestHostileManifestSegmentNames is issue 17.9: segment names from the
// manifest reached DeleteObjects unchecked, so a manifest naming any
// object of the bucket as an empty segment made the next commit delete
// it. Names must now have the segment form.
func TestHostileManifestSegmentNames(t *testing.T) {
	for _, victim := range []string{"cursor/k-6b", "manifest2", "seg/../cursor/k-6b", "seg/x.seg"} {
		t.Run(victim, func(t *testing.T) {
			f := newFakeS3(t)
			ctx := context.Background()
			seg, size := hostileSetup(t, f)
			f.putObject(t, "p/"+victim, []byte("someone else's object"))
			f.putObject(t, "p/manifest", s3store.CraftManifest(9,
				[]s3store.CraftedSegment{{Name: seg, Size: size, Data: size - 28}, {Name: victim, Size: 10, Data: 10}},
				map[string]s3store.CraftedLoc{}))
			cold, _ := f.store(t, s3store.WithPrefix("p"))
			err := cold.SaveBatch(ctx, batch(1, 2))
			require.ErrorIs(t, err, streaming.ErrCorrupt)
			require.ErrorContains(t, err, "s3://"+testBucket+"/p/manifest")
			require.ErrorContains(t, err, "segment name")
			require.Equal(t, []byte("someone else's object"), f.getObject(t, "p/"+victim), "the object the manifest named is still there")
		})
	}
}

// TestArchiveListingTruncatedWithoutMarkers: a server that says a listing
// is truncated but gives nothing to continue from made ListUploads ask
// for the same page forever, and ListPage and the state store's listings
// return the first page as the whole listing. They now fail, naming the
// listing.
func TestArchiveListingTruncatedWithoutMarkers(t *testing.T) {
	var uploadsAsked atomic.Int64
	f := newFakeS3Behind(t, func(fake http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			q := r.URL.Query()
			switch {
			case r.Method == http.MethodGet && q.Has("uploads"):
				if uploadsAsked.Add(1) > 100 {
					http.Error(w, "asked too often", http.StatusForbidden)
					return
				}
				w.Header().Set("Content-Type", "application/xml")
				fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><ListMultipartUploadsResult><Bucket>%s</Bucket><IsTruncated>true</IsTruncated>`+
					`<Upload><Key>p/a.parquet</Key><UploadId>u1</UploadId></Upload></ListMultipartUploadsResult>`, testBucket)
			case r.Method == http.MethodGet && q.Get("list-type") == "2":
				w.Header().Set("Content-Type", "application/xml")
				fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><ListBucketResult><Name>%s</Name><IsTruncated>true</IsTruncated><KeyCount>1</KeyCount>`+
					`<Contents><Key>p/a.parquet</Key><Size>3</Size></Contents></ListBucketResult>`, testBucket)
			default:
				fake.ServeHTTP(w, r)
			}
		})
	})
	ctx := context.Background()
	a, err := s3store.NewArchive(ctx, testBucket, f.opts(s3store.WithPrefix("p"))...)
	require.NoError(t, err)

	_, err = a.ListUploads(ctx, "")
	require.ErrorContains(t, err, "truncated but gives no next marker")
	require.ErrorContains(t, err, "s3://"+testBucket+"/p/*")
	require.Equal(t, int64(1), uploadsAsked.Load(), "the page was asked for again")

	_, err = a.ListPage(ctx, "", "", 0)
	require.ErrorContains(t, err, "truncated but gives no continuation token")

	// The state store's listing of its shards' folders (the SDK's
	// paginator stopped there): a shard and its epoch would be missed.
	st, _ := f.store(t, s3store.WithPrefix("p"), s3store.WithShardOf(func([]byte) (string, bool) { return "s", true }))
	_, err = st.ListKeys(ctx)
	require.ErrorContains(t, err, "truncated but gives no continuation token")
	require.ErrorContains(t, err, "s3://"+testBucket+"/p/")
}
