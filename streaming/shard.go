package streaming

import (
	"fmt"
	"strconv"
	"strings"
)

// ShardID names one shard of a pipeline's input: the unit of ownership,
// checkpoints and handoff. Its text is the one name of the shard in
// workflow ids, activity inputs, checkpoint keys, metrics and logs.
//
// A Kafka partition's shard is "<topic>/<partition>" (KafkaShard, and
// ShardID.KafkaPartition parses it back); a source without partitions
// names its one shard itself (an MQTT source: its client id).
type ShardID string

// KafkaShard is the shard of one Kafka partition: "<topic>/<partition>".
func KafkaShard(topic string, partition int32) ShardID {
	return ShardID(topic + "/" + strconv.Itoa(int(partition)))
}

// KafkaPartition parses a shard named by KafkaShard. Kafka topics cannot
// hold a slash, so the text before the last one is the topic.
func (s ShardID) KafkaPartition() (topic string, partition int32, err error) {
	i := strings.LastIndexByte(string(s), '/')
	if i <= 0 || strings.IndexByte(string(s[:i]), '/') >= 0 {
		return "", 0, fmt.Errorf("shard %q is not a Kafka partition (<topic>/<partition>)", string(s))
	}
	n, err := strconv.ParseInt(string(s[i+1:]), 10, 32)
	// Only KafkaShard's form: "readings/07" or "readings/+7" would name
	// partition 7 under a shard id its owner never uses.
	if err != nil || n < 0 || strconv.FormatInt(n, 10) != string(s[i+1:]) {
		return "", 0, fmt.Errorf("shard %q is not a Kafka partition: %q is not a partition number", string(s), string(s[i+1:]))
	}
	return string(s[:i]), int32(n), nil
}

// String returns the shard's name.
func (s ShardID) String() string { return string(s) }
