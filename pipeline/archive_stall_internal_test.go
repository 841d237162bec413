package pipeline

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/parquet"
)

// stallArchive is a local archive whose uploads, once stalled, wait
// until their context ends: an S3 endpoint that stopped answering.
type stallArchive struct {
	*parquet.LocalArchive
	stall   atomic.Bool
	stalled chan struct{}
}

func (a *stallArchive) wait(ctx context.Context) error {
	if a.stall.Load() {
		select {
		case a.stalled <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

func (a *stallArchive) CreateUpload(ctx context.Context, name string) (string, error) {
	if err := a.wait(ctx); err != nil {
		return "", err
	}
	return a.LocalArchive.CreateUpload(ctx, name)
}

func (a *stallArchive) UploadPart(ctx context.Context, name, id string, n int, off int64, data []byte) (parquet.Part, error) {
	if err := a.wait(ctx); err != nil {
		return parquet.Part{}, err
	}
	return a.LocalArchive.UploadPart(ctx, name, id, n, off, data)
}

// TestReleaseIsNotHeldByTheArchiveAtACut: a round's cut comes while the
// archive has stopped answering, with rows held since an earlier cut
// whose pre-commit never came and the open file due to be finished. The
// partition being released must still stop: its goroutine must not wait
// behind the cut for the archive. Bug: the archive sink uploaded the
// held rows inside MarkCut, under the shard's lock, with a context only
// the release (which waits for that goroutine) cancels.
func TestReleaseIsNotHeldByTheArchiveAtACut(t *testing.T) {
	ctx := context.Background()
	la, err := parquet.NewLocalArchive(t.TempDir())
	require.NoError(t, err)
	arc := &stallArchive{LocalArchive: la, stalled: make(chan struct{}, 1)}
	var now atomic.Int64
	now.Store(time.Now().UnixNano())
	sink, err := parquet.NewSink(arc, "plant", parquet.WithMaxFileAge(time.Minute), parquet.WithClock(func() time.Time { return time.Unix(0, now.Load()) }))
	require.NoError(t, err)
	p := smaPipeline(t, 1)
	p.Sinks = []SinkSpec{Use(sink)}
	_, k := openPartitionZero(ctx, t, p)
	rec := func(off int64) []*kgo.Record {
		return []*kgo.Record{{Topic: "readings", Offset: off, Value: fmt.Appendf(nil, `{"sensor":"a","ts":%d,"value":1}`, off+1)}}
	}
	require.NoError(t, k.apply(ctx, rec(0)))
	_, err = k.cp.Snapshot(ctx, 1) // a round's cut; its stage 2 never comes
	require.NoError(t, err)
	require.NoError(t, k.apply(ctx, rec(1)))
	now.Add(int64(2 * time.Minute))
	arc.stall.Store(true)
	cut := make(chan struct{})
	go func() { // the next round's cut
		defer close(cut)
		_, _ = k.cp.Snapshot(ctx, 1)
	}()
	select {
	case <-arc.stalled:
	case <-cut:
	}
	hctx, cancel := context.WithCancel(ctx)
	handled := make(chan error, 1)
	go func() { handled <- k.Handle(hctx, rec(2)) }()
	cancel() // the partition is being released
	select {
	case <-handled:
	case <-time.After(10 * time.Second):
		t.Fatal("the partition's goroutine waits behind the cut for the archive")
	}
	arc.stall.Store(false)
	<-cut
}
