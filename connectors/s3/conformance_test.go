package s3_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	s3store "github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/statetest"
)

func TestStoreConformance(t *testing.T) {
	statetest.Run(t, func(t *testing.T) streaming.StateStore {
		st, _ := newFakeS3(t).store(t, s3store.WithPrefix("conformance"))
		return st
	})
}

func TestCursorStoreConformance(t *testing.T) {
	statetest.RunCursorStore(t, func(t *testing.T) streaming.CursorStore {
		f := newFakeS3(t)
		cs, err := s3store.NewCursorStore(context.Background(), testBucket, f.opts(s3store.WithPrefix("cursors"))...)
		require.NoError(t, err)
		return cs
	})
}
