package split_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/memstore"
	"github.com/tflo-io/tflo/coordination/split"
)

// TestIDsWhoseKeysAreTooLongAreRefused: a split or worker id is a valid
// key of up to coordination.MaxKeyLen bytes, but the protocol's keys
// prefix it ("lease.", "worker."). A split id of 1019 bytes passed
// Validate and AddSplits, then every claim's lease write was refused as
// Fatal and ignored, so the split never ran and nothing said why; a worker
// id of 1020 bytes passed NewWorker and Run failed on its presence key.
// Both are refused up front, naming the id and the limit.
func TestIDsWhoseKeysAreTooLongAreRefused(t *testing.T) {
	s, err := memstore.New()
	require.NoError(t, err)
	ctx := context.Background()

	long := split.SplitID(strings.Repeat("s", coordination.MaxKeyLen-len("spec.")))
	err = split.AddSplits(ctx, s, split.Spec{ID: long, Weight: 1})
	require.Error(t, err, "a split whose lease key is above the key limit")
	require.Contains(t, err.Error(), "at most 1018 bytes")
	l, err := s.List(ctx, coordination.Durable, "")
	require.NoError(t, err)
	require.Empty(t, l, "nothing is stored for a refused split")
	fits := split.SplitID(strings.Repeat("s", coordination.MaxKeyLen-len("lease.")))
	require.NoError(t, split.AddSplits(ctx, s, split.Spec{ID: fits, Weight: 1}))

	handler := split.WithHandler(untilStopped)
	_, err = split.NewWorker(s, split.WorkerID(strings.Repeat("w", coordination.MaxKeyLen-len("worker.")+1)), handler)
	require.Error(t, err, "a worker whose presence key is above the key limit")
	require.Contains(t, err.Error(), "at most 1017 bytes")
	_, err = split.NewWorker(s, split.WorkerID(strings.Repeat("w", coordination.MaxKeyLen-len("worker."))), handler)
	require.NoError(t, err)
}
