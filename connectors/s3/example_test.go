package s3_test

import (
	"context"
	"fmt"
	"net/http/httptest"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	s3store "github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/streaming"
)

// A checkpoint of many keys is one segment PUT and one manifest PUT; a
// restore of one key is one ranged GET after the manifest.
func ExampleNew() {
	// An S3-compatible server for the example; in production, drop
	// WithEndpoint/WithPathStyle/WithStaticCredentials to use AWS and the
	// standard credential chain.
	backend := s3mem.New()
	_ = backend.CreateBucket("state")
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	defer srv.Close()

	ctx := context.Background()
	var requests s3store.RequestCounter
	st, err := s3store.New(ctx, "state",
		s3store.WithEndpoint(srv.URL), s3store.WithPathStyle(true), s3store.WithRegion("us-east-1"),
		s3store.WithStaticCredentials("AKIDEXAMPLE", "example-secret", ""),
		s3store.WithPrefix("pipeline-1/shard-3"),
		s3store.WithAPIOptions(requests.Register))
	if err != nil {
		fmt.Println(err)
		return
	}
	items := make([]streaming.KeyedSnapshot, 1000)
	for i := range items {
		items[i] = streaming.KeyedSnapshot{
			Key:      fmt.Appendf(nil, "sensor-%d", i),
			Snapshot: streaming.Snapshot{Meta: streaming.SnapshotMeta{Epoch: 1}, Data: fmt.Appendf(nil, "sum=%d", i)},
		}
	}
	if err := st.SaveBatch(ctx, items); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("PUTs for 1000 keys:", requests.Count("PutObject"))

	snap, err := st.Load(ctx, []byte("sensor-42"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("sensor-42: %s (epoch %d)\n", snap.Data, snap.Meta.Epoch)
	// Output:
	// PUTs for 1000 keys: 2
	// sensor-42: sum=42 (epoch 1)
}
