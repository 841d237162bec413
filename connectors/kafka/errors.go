package kafka

import (
	"errors"
	"fmt"
)

// ErrAuthentication is wrapped by errors for a broker that refused the
// client's credentials (a wrong SASL password or an unknown user). The
// client does not retry: the error is returned once, not a reconnect storm.
var ErrAuthentication = errors.New("kafka authentication failed")

// ErrFencedInstance is wrapped by Run's error when another member joined
// the group with this member's instance id (WithInstanceID): two
// processes were given one worker id. The newer one keeps the id.
var ErrFencedInstance = errors.New("kafka group instance id taken over by another member")

// ErrClosed is returned by operations on a closed Source or Publisher.
var ErrClosed = errors.New("kafka connector closed")

// ErrUnsupportedEnvelope is wrapped by DecodeSignal for an envelope whose
// version is newer than this build reads.
var ErrUnsupportedEnvelope = errors.New("unsupported envelope version")

// DecodeError is what a Decoder failure becomes: it names the record's
// topic, partition and offset. The record goes to the dead-letter topic.
type DecodeError struct {
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("decode record %s/%d@%d: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// PartitionError is an error of one partition's restore or checkpoint.
type PartitionError struct {
	Partition Partition
	Op        string // "restore", "checkpoint", ...
	Err       error
}

func (e *PartitionError) Error() string {
	return fmt.Sprintf("%s partition %s: %v", e.Op, e.Partition, e.Err)
}

func (e *PartitionError) Unwrap() error { return e.Err }
