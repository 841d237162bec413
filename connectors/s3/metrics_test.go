package s3_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	s3store "github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/streaming"
)

func TestRequestMetrics(t *testing.T) {
	f := newFakeS3(t)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	m := s3store.NewRequestMetrics(reg, testBucket)
	st, err := s3store.New(ctx, testBucket, f.opts(s3store.WithAPIOptions(m.Register))...)
	require.NoError(t, err)

	_, err = st.Load(ctx, []byte("absent")) // GET of the missing manifest: a 404 attempt
	require.ErrorIs(t, err, streaming.ErrNotFound)
	require.NoError(t, st.SaveBatch(ctx, batch(100, 1)))

	require.Equal(t, 2.0, testutil.ToFloat64(m.Requests.WithLabelValues(testBucket, "PutObject", "ok")))
	require.Equal(t, 1.0, testutil.ToFloat64(m.Requests.WithLabelValues(testBucket, "GetObject", "error")))
	require.Greater(t, testutil.ToFloat64(m.Bytes.WithLabelValues(testBucket, "PutObject")), 1000.0)
	n, err := testutil.GatherAndCount(reg, "tflo_s3_request_seconds")
	require.NoError(t, err)
	require.Equal(t, 2, n, "one histogram per operation seen")
}
