package streaming

import (
	"encoding/binary"
	"fmt"

	"github.com/tflo-io/tflo/internal/wire"
)

// CursorTypeKafka is the SnapshotMeta.CursorType and CursorRecord.Type of a
// KafkaOffset.
const CursorTypeKafka = "kafka"

// kafkaOffsetVersion is the version byte of the KafkaOffset encoding:
//
//	'K' | version | uvarint len(topic) topic | varint partition | varint offset
const kafkaOffsetVersion = 1

// maxKafkaTopicLen is Kafka's limit on topic names.
const maxKafkaTopicLen = 249

// KafkaOffset is the position in one Kafka partition: Offset is the offset
// of the last record the state contains, so consumption resumes at Next().
// Offset -1 means nothing of the partition has been applied yet.
//
// A KafkaOffset is a value; it is safe to copy and to share.
type KafkaOffset struct {
	Topic     string
	Partition int32
	Offset    int64
}

var _ Cursor = KafkaOffset{}

// Next returns the offset to resume consuming at: the one after Offset.
func (k KafkaOffset) Next() int64 { return k.Offset + 1 }

// Bytes encodes k; ParseKafkaOffset reverses it.
func (k KafkaOffset) Bytes() []byte {
	b := make([]byte, 0, 2+binary.MaxVarintLen64+len(k.Topic)+binary.MaxVarintLen32+binary.MaxVarintLen64)
	b = append(b, 'K', kafkaOffsetVersion)
	b = wire.AppendString(b, k.Topic)
	b = binary.AppendVarint(b, int64(k.Partition))
	return binary.AppendVarint(b, k.Offset)
}

// String formats k as topic/partition@offset, e.g. "readings/3@1041".
func (k KafkaOffset) String() string {
	return fmt.Sprintf("%s/%d@%d", k.Topic, k.Partition, k.Offset)
}

// Validate reports a KafkaOffset that no Kafka partition can have: an empty
// or over-long topic, a topic with characters Kafka refuses, a negative
// partition or an offset below -1.
func (k KafkaOffset) Validate() error {
	if k.Topic == "" {
		return fmt.Errorf("kafka offset %s: empty topic", k)
	}
	if len(k.Topic) > maxKafkaTopicLen {
		return fmt.Errorf("kafka offset: topic of %d bytes is longer than Kafka's limit of %d", len(k.Topic), maxKafkaTopicLen)
	}
	for i := 0; i < len(k.Topic); i++ {
		c := k.Topic[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("kafka offset: topic %q has byte %q at %d; Kafka topics use [a-zA-Z0-9._-]", k.Topic, c, i)
		}
	}
	if k.Partition < 0 {
		return fmt.Errorf("kafka offset %s: negative partition %d", k, k.Partition)
	}
	if k.Offset < -1 {
		return fmt.Errorf("kafka offset %s: offset %d is below -1", k, k.Offset)
	}
	return nil
}

// ParseKafkaOffset decodes KafkaOffset.Bytes. Malformed bytes and offsets
// that fail Validate are refused with an error wrapping ErrCorrupt.
func ParseKafkaOffset(b []byte) (KafkaOffset, error) {
	if len(b) < 2 || b[0] != 'K' {
		return KafkaOffset{}, fmt.Errorf("kafka offset: %d bytes do not start with the 'K' tag: %w", len(b), ErrCorrupt)
	}
	if b[1] != kafkaOffsetVersion {
		return KafkaOffset{}, fmt.Errorf("kafka offset: encoding version %d, this build reads %d: %w", b[1], kafkaOffsetVersion, ErrCorrupt)
	}
	r := wire.Reader{B: b, Off: 2}
	var k KafkaOffset
	k.Topic = r.Str()
	p := r.Varint()
	k.Offset = r.Varint()
	if r.Err != nil {
		return KafkaOffset{}, fmt.Errorf("kafka offset: %v: %w", r.Err, ErrCorrupt)
	}
	if r.Off != len(b) {
		return KafkaOffset{}, fmt.Errorf("kafka offset: %d trailing bytes: %w", len(b)-r.Off, ErrCorrupt)
	}
	if p < 0 || p > 1<<31-1 {
		return KafkaOffset{}, fmt.Errorf("kafka offset: partition %d out of range: %w", p, ErrCorrupt)
	}
	k.Partition = int32(p)
	if err := k.Validate(); err != nil {
		return KafkaOffset{}, fmt.Errorf("%w: %w", err, ErrCorrupt)
	}
	return k, nil
}
