package streaming_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

func TestCheckpointKeyShard(t *testing.T) {
	for _, shard := range []string{"kafka/central/readings/3", "s", "a/piece/1/2/3", "x/manifest"} {
		got, ok := streaming.CheckpointKeyShard(streaming.CheckpointManifestKey(shard))
		require.True(t, ok)
		require.Equal(t, shard, got)
		got, ok = streaming.CheckpointKeyShard([]byte(streaming.CheckpointPieceKey(shard, 7, 12, 0)))
		require.True(t, ok)
		require.Equal(t, shard, got)
	}
	for _, key := range []string{"", "manifest", "/manifest", "sensor/1", "s/piece/1/2", "s/piece/1/2/x", "/piece/1/2/3", "s/piece/1/2/3/", "s/pieces/1/2/3"} {
		_, ok := streaming.CheckpointKeyShard([]byte(key))
		require.False(t, ok, "key %q", key)
	}
}
