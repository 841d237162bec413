package kafka

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Dead-letter headers: where the record came from and why it failed.
const (
	HeaderDLQTopic     = "tflo-dlq-topic"
	HeaderDLQPartition = "tflo-dlq-partition"
	HeaderDLQOffset    = "tflo-dlq-offset"
	HeaderDLQGroup     = "tflo-dlq-group"
	HeaderDLQError     = "tflo-dlq-error"
)

// maxErrorHeader bounds the error text carried in a dead letter.
const maxErrorHeader = 1024

// DeadLetter returns the record to produce to dlqTopic for rec, which
// failed with cause: the original key, value and headers, plus headers
// naming the source topic, partition, offset, group and the error.
//
// Dead letters are at least once: a partition replayed from its last
// checkpoint (after a crash or a lost session) sends its bad records
// again. The source headers identify a record, so a DLQ reader dedupes on
// (topic, partition, offset).
func DeadLetter(dlqTopic, group string, rec *kgo.Record, cause error) *kgo.Record {
	msg := cause.Error()
	if len(msg) > maxErrorHeader {
		msg = msg[:maxErrorHeader]
	}
	hs := make([]kgo.RecordHeader, 0, len(rec.Headers)+5)
	hs = append(hs, rec.Headers...)
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderDLQTopic, Value: []byte(rec.Topic)},
		kgo.RecordHeader{Key: HeaderDLQPartition, Value: strconv.AppendInt(nil, int64(rec.Partition), 10)},
		kgo.RecordHeader{Key: HeaderDLQOffset, Value: strconv.AppendInt(nil, rec.Offset, 10)},
		kgo.RecordHeader{Key: HeaderDLQGroup, Value: []byte(group)},
		kgo.RecordHeader{Key: HeaderDLQError, Value: []byte(msg)},
	)
	return &kgo.Record{Topic: dlqTopic, Key: rec.Key, Value: rec.Value, Headers: hs, Timestamp: rec.Timestamp}
}
