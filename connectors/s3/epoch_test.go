package s3_test

import (
	"context"
	"encoding/hex"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	s3store "github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/statetest"
)

func TestClaimEpoch(t *testing.T) {
	f := newFakeS3(t)
	t.Run("Conformance", func(t *testing.T) {
		statetest.RunEpochClaimer(t, func(t *testing.T) streaming.EpochClaimer {
			st, _ := f.store(t, s3store.WithPrefix("conformance"))
			return st
		})
	})
	t.Run("OneObjectPerName", func(t *testing.T) {
		st, _ := f.store(t)
		for range 3 {
			_, err := st.ClaimEpoch(context.Background(), "edge/gw 1", 1)
			require.NoError(t, err)
		}
		require.Equal(t, []string{"epochs/k-" + hex.EncodeToString([]byte("edge/gw 1"))}, f.objectNames(t, "epochs/"))
		require.Equal(t, "3", string(f.getObject(t, "epochs/k-"+hex.EncodeToString([]byte("edge/gw 1")))), "the last epoch claimed")
	})
	t.Run("NotANumber", func(t *testing.T) {
		st, _ := f.store(t)
		f.putObject(t, "epochs/k-"+hex.EncodeToString([]byte("x")), []byte("7x"))
		_, err := st.ClaimEpoch(context.Background(), "x", 1)
		require.ErrorIs(t, err, streaming.ErrCorrupt)
		require.ErrorContains(t, err, "s3://"+testBucket+"/epochs/k-78")
		require.ErrorContains(t, err, `the last claim "7x" is not an epoch`)
	})
	t.Run("LargestEpoch", func(t *testing.T) {
		st, _ := f.store(t)
		obj := "epochs/k-" + hex.EncodeToString([]byte("z"))
		f.putObject(t, obj, []byte("18446744073709551615"))
		got, err := st.ClaimEpoch(context.Background(), "z", 1)
		require.ErrorContains(t, err, "s3://"+testBucket+"/"+obj, "claimed epoch %d", uint64(got))
		require.ErrorContains(t, err, "no epoch is past it")
		require.Equal(t, "18446744073709551615", string(f.getObject(t, obj)), "the last claim is kept")
	})
	t.Run("WithoutConditionalWrites", func(t *testing.T) {
		st, _ := f.store(t, s3store.WithConditionalWrites(false))
		_, err := st.ClaimEpoch(context.Background(), "y", 1)
		require.ErrorIs(t, err, errors.ErrUnsupported)
		require.ErrorContains(t, err, "needs conditional writes")
	})
}
