package streaming_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

func TestKafkaShardRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		topic string
		part  int32
	}{{"readings", 0}, {"signals.dlq", 7}, {"a_b-c", 2147483647}} {
		s := streaming.KafkaShard(tc.topic, tc.part)
		topic, part, err := s.KafkaPartition()
		require.NoError(t, err)
		require.Equal(t, tc.topic, topic)
		require.Equal(t, tc.part, part)
	}
	for _, bad := range []streaming.ShardID{"", "readings", "/3", "readings/", "readings/-1", "readings/x", "a/b/3", "readings/99999999999", "readings/07", "readings/+7", "readings/-0"} {
		_, _, err := bad.KafkaPartition()
		require.Error(t, err, "%q", bad)
		require.Contains(t, err.Error(), string(bad))
	}
}
