package s3test_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/testsuite/s3test"
)

// A stopped server refuses requests; restarted, it answers on the same
// URL with the objects written before the stop.
func TestStopRestartKeepsPortAndObjects(t *testing.T) {
	srv := s3test.Start(t, "bucket")
	url := srv.URL
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	loc, err := archiveloc.Parse("s3://bucket/p")
	require.NoError(t, err)
	a, err := archiveloc.Open(ctx, loc, srv.Settings(t))
	require.NoError(t, err)
	require.NoError(t, a.PutAtomic(ctx, "x", []byte("kept")))

	srv.Stop()
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
	_, err = a.List(lctx, "")
	lcancel()
	require.Error(t, err, "a stopped server answered")

	srv.Restart(t)
	require.Equal(t, url, srv.URL)
	objs, err := a.List(ctx, "")
	require.NoError(t, err)
	require.Len(t, objs, 1)
	o, err := a.Open(ctx, objs[0].Name)
	require.NoError(t, err)
	defer o.Close()
	b := make([]byte, 4)
	_, err = o.ReadAt(b, 0)
	require.NoError(t, err)
	require.Equal(t, "kept", string(b))
}
