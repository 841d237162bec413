package s3_test

import (
	"context"
	"encoding/hex"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	s3store "github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/streaming"
)

// claimEpochs: runs claiming a name's epoch at once, each with its own
// Store (as separate processes would), each get their own, past atLeast
// and past every claim before; the name's object holds the last.
func claimEpochs(t *testing.T, open func(t *testing.T) *s3store.Store, names func(prefix string) []string) {
	ctx := context.Background()
	const runs = 12
	stores := make([]*s3store.Store, runs)
	for i := range stores {
		stores[i] = open(t)
	}
	got := make(chan streaming.Epoch, runs)
	var wg sync.WaitGroup
	for _, st := range stores {
		wg.Go(func() {
			ep, err := st.ClaimEpoch(ctx, "edge/gw 1", 5)
			assert.NoError(t, err)
			got <- ep
		})
	}
	wg.Wait()
	close(got)
	seen := map[streaming.Epoch]bool{}
	for ep := range got {
		require.False(t, seen[ep], "epoch %d claimed twice", ep)
		seen[ep] = true
	}
	for ep := streaming.Epoch(5); ep < 5+runs; ep++ {
		require.True(t, seen[ep], "epochs 5..%d, one each: missing %d (got %v)", 4+runs, ep, seen)
	}
	// Past every claim, whatever the restored checkpoint says.
	ep, err := stores[0].ClaimEpoch(ctx, "edge/gw 1", 3)
	require.NoError(t, err)
	require.Equal(t, streaming.Epoch(5+runs), ep)
	// A checkpoint restored past every claim wins over them.
	ep, err = stores[1].ClaimEpoch(ctx, "edge/gw 1", 100)
	require.NoError(t, err)
	require.Equal(t, streaming.Epoch(100), ep)
	require.Equal(t, []string{"epochs/k-" + hex.EncodeToString([]byte("edge/gw 1"))}, names("epochs/"), "one object per name")
	// Another name, another count.
	ep, err = stores[2].ClaimEpoch(ctx, "edge/gw 2", 1)
	require.NoError(t, err)
	require.Equal(t, streaming.Epoch(1), ep)
}

func TestClaimEpoch(t *testing.T) {
	f := newFakeS3(t)
	claimEpochs(t, func(t *testing.T) *s3store.Store {
		st, _ := f.store(t)
		return st
	}, func(prefix string) []string { return f.objectNames(t, prefix) })

	t.Run("NotANumber", func(t *testing.T) {
		st, _ := f.store(t)
		f.putObject(t, "epochs/k-"+hex.EncodeToString([]byte("x")), []byte("7x"))
		_, err := st.ClaimEpoch(context.Background(), "x", 1)
		require.ErrorIs(t, err, streaming.ErrCorrupt)
		require.ErrorContains(t, err, "s3://"+testBucket+"/epochs/k-78")
		require.ErrorContains(t, err, `the last claim "7x" is not an epoch`)
	})
	t.Run("WithoutConditionalWrites", func(t *testing.T) {
		st, _ := f.store(t, s3store.WithConditionalWrites(false))
		_, err := st.ClaimEpoch(context.Background(), "y", 1)
		require.ErrorIs(t, err, errors.ErrUnsupported)
		require.ErrorContains(t, err, "needs conditional writes")
	})
}
