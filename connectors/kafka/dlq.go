package kafka

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/streaming"
)

// Dead-letter headers: where the record came from and why it failed.
// Every one starts with HeaderDLQPrefix; a record's own headers with that
// prefix are dropped from its dead letter, so a producer cannot forge
// them.
const (
	HeaderDLQPrefix    = "tflo-dlq-"
	HeaderDLQTopic     = "tflo-dlq-topic"
	HeaderDLQPartition = "tflo-dlq-partition"
	HeaderDLQOffset    = "tflo-dlq-offset"
	HeaderDLQGroup     = "tflo-dlq-group"
	HeaderDLQError     = "tflo-dlq-error"
	// HeaderDLQPacketID is the MQTT packet id of a dead letter from an
	// MQTT source sent to Kafka (its partition and offset are -1).
	HeaderDLQPacketID = "tflo-dlq-packet-id"
	// Set on a dead letter that was too large for the broker and was cut
	// (see TruncateDeadLetter): what was cut ("value", "key,value",
	// "value,headers", ...), and the original length and SHA-256 (hex) of
	// the key and of the value.
	HeaderDLQTruncated   = "tflo-dlq-truncated"
	HeaderDLQKeyBytes    = "tflo-dlq-key-bytes"
	HeaderDLQKeySHA256   = "tflo-dlq-key-sha256"
	HeaderDLQValueBytes  = "tflo-dlq-value-bytes"
	HeaderDLQValueSHA256 = "tflo-dlq-value-sha256"
)

// maxErrorHeader bounds the error text carried in a dead letter.
const maxErrorHeader = 1024

// Bounds of a truncated dead letter: what is left of the key and the
// value. With the tflo-dlq-* headers (the error is at most 1 KiB) it is
// about 18 KiB, far below any broker's message limit.
const (
	truncatedKeyBytes   = 1 << 10
	truncatedValueBytes = 16 << 10
)

// DeadLetter returns the record to produce to dlqTopic for rec, which
// failed with cause: the original key, value and headers (but for any
// header whose key starts with HeaderDLQPrefix, in any case), plus headers
// naming the source topic, partition, offset, group and the error.
//
// Dead letters are at least once: a partition replayed from its last
// checkpoint (after a crash or a lost session) sends its bad records
// again. The source headers identify a record of a Kafka source, so a DLQ
// reader dedupes those on (topic, partition, offset); dead letters with
// offset -1 (an MQTT source's, and outputs the Publisher dead-letters for
// their size) carry no such identity and cannot be deduplicated by them.
func DeadLetter(dlqTopic, group string, rec *kgo.Record, cause error) *kgo.Record {
	msg := cause.Error()
	if len(msg) > maxErrorHeader {
		// Cut at a rune's start: an error quoting a non-ASCII key or field
		// must stay valid UTF-8 for readers that take the header as text.
		n := maxErrorHeader
		for n > maxErrorHeader-utf8.UTFMax && !utf8.RuneStart(msg[n]) {
			n--
		}
		msg = msg[:n]
	}
	hs := make([]kgo.RecordHeader, 0, len(rec.Headers)+5)
	for _, h := range rec.Headers {
		if !isDLQHeader(h.Key) {
			hs = append(hs, h)
		}
	}
	hs = append(hs,
		kgo.RecordHeader{Key: HeaderDLQTopic, Value: []byte(rec.Topic)},
		kgo.RecordHeader{Key: HeaderDLQPartition, Value: strconv.AppendInt(nil, int64(rec.Partition), 10)},
		kgo.RecordHeader{Key: HeaderDLQOffset, Value: strconv.AppendInt(nil, rec.Offset, 10)},
		kgo.RecordHeader{Key: HeaderDLQGroup, Value: []byte(group)},
		kgo.RecordHeader{Key: HeaderDLQError, Value: []byte(msg)},
	)
	return &kgo.Record{Topic: dlqTopic, Key: rec.Key, Value: rec.Value, Headers: hs, Timestamp: rec.Timestamp}
}

func isDLQHeader(key string) bool {
	return len(key) >= len(HeaderDLQPrefix) && strings.EqualFold(key[:len(HeaderDLQPrefix)], HeaderDLQPrefix)
}

// TruncateDeadLetter returns a copy of dl small enough for any broker: its
// value cut to 16 KiB and its key to 1 KiB (each, when cut, with headers
// giving the original length and SHA-256), its own tflo-dlq-* headers
// kept and the original record's other headers dropped when the cut copy
// would otherwise not be small. HeaderDLQTruncated says what was cut. A
// DLQ reader can match the copy to its source record by the source
// headers and check it by the digests.
func TruncateDeadLetter(dl *kgo.Record) *kgo.Record {
	out := &kgo.Record{Topic: dl.Topic, Timestamp: dl.Timestamp, Key: dl.Key, Value: dl.Value}
	var cut []string
	var hs, own []kgo.RecordHeader
	for _, h := range dl.Headers {
		if isDLQHeader(h.Key) {
			own = append(own, h)
		} else {
			hs = append(hs, h)
		}
	}
	if len(dl.Key) > truncatedKeyBytes {
		sum := sha256.Sum256(dl.Key)
		out.Key = dl.Key[:truncatedKeyBytes:truncatedKeyBytes]
		cut = append(cut, "key")
		own = append(own,
			kgo.RecordHeader{Key: HeaderDLQKeyBytes, Value: strconv.AppendInt(nil, int64(len(dl.Key)), 10)},
			kgo.RecordHeader{Key: HeaderDLQKeySHA256, Value: []byte(hex.EncodeToString(sum[:]))})
	}
	// The value is always cut and described, even when it is short: the
	// copy says plainly that it is not the whole record.
	sum := sha256.Sum256(dl.Value)
	out.Value = dl.Value[:min(len(dl.Value), truncatedValueBytes):min(len(dl.Value), truncatedValueBytes)]
	cut = append(cut, "value")
	own = append(own,
		kgo.RecordHeader{Key: HeaderDLQValueBytes, Value: strconv.AppendInt(nil, int64(len(dl.Value)), 10)},
		kgo.RecordHeader{Key: HeaderDLQValueSHA256, Value: []byte(hex.EncodeToString(sum[:]))})
	headerBytes := 0
	for _, h := range hs {
		headerBytes += len(h.Key) + len(h.Value)
	}
	if headerBytes > truncatedKeyBytes {
		hs = nil
		cut = append(cut, "headers")
	}
	own = append(own, kgo.RecordHeader{Key: HeaderDLQTruncated, Value: []byte(strings.Join(cut, ","))})
	out.Headers = append(hs, own...)
	return out
}

// recordBytes is a record's size as the producer counts it against its
// batch limit (key, value and headers), plus room for the record and
// batch framing.
func recordBytes(r *kgo.Record) int {
	n := len(r.Key) + len(r.Value) + 128
	for _, h := range r.Headers {
		n += len(h.Key) + len(h.Value) + 10
	}
	return n
}

// ProduceDeadLetter produces dl with cl like cl.Produce, but a dead letter
// too large for the broker (or for the client's ProducerBatchMaxBytes) is
// sent as its TruncateDeadLetter copy instead: up front when it is larger
// than batchMax (cl's ProducerBatchMaxBytes, which the caller reads once;
// 0 for no limit), as kgo would fail it before buffering it, outside any
// Flush; and again after the broker refuses it with MESSAGE_TOO_LARGE.
// promise sees the fate of what was finally sent. A record so large that
// even its truncated copy is refused is logged and dropped — promise sees
// no error — so a dead letter's size never fails a checkpoint. Every
// produce is buffered before the call (or the promise it runs in)
// returns, so a Flush of cl covers the truncated copy too.
func ProduceDeadLetter(ctx context.Context, cl *kgo.Client, batchMax int, dl *kgo.Record, log *slog.Logger, promise func(*kgo.Record, error)) {
	produceDeadLetter(ctx, cl, batchMax, dl, log, func(r *kgo.Record, err error) {
		if err == errDeadLetterDropped {
			err = nil
		}
		promise(r, err)
	})
}

// errDeadLetterDropped is what produceDeadLetter's promise sees for a
// dead letter dropped because even its truncated copy was too large: it
// is lost, though it must not fail a checkpoint.
var errDeadLetterDropped = errors.New("dead letter dropped: too large for the broker even truncated")

// produceDeadLetter is ProduceDeadLetter whose promise sees
// errDeadLetterDropped for a dropped dead letter, so a caller can count it.
func produceDeadLetter(ctx context.Context, cl *kgo.Client, batchMax int, dl *kgo.Record, log *slog.Logger, promise func(*kgo.Record, error)) {
	if overLimit(dl, batchMax) {
		dl = TruncateDeadLetter(dl)
	}
	var retry func(*kgo.Record, error)
	retry = func(r *kgo.Record, err error) {
		switch {
		case err == nil || !errors.Is(err, kerr.MessageTooLarge):
			promise(r, err)
		case isTruncated(r):
			log.Error("dead letter dropped: too large for the broker even truncated",
				"dlq", r.Topic, "key", streaming.QuoteKey(r.Key), "bytes", recordBytes(r), "err", err)
			promise(r, errDeadLetterDropped)
		default:
			log.Warn("dead letter too large for the broker; sending it truncated",
				"dlq", r.Topic, "value_bytes", len(r.Value), "key_bytes", len(r.Key), "err", err)
			// Inside a promise: TryProduce buffers before returning (or
			// fails at once), so a concurrent Flush waits for the copy.
			cl.TryProduce(ctx, TruncateDeadLetter(r), retry)
		}
	}
	cl.Produce(ctx, dl, retry)
}

// overLimit reports whether r is larger than limit bytes (0: no limit).
func overLimit(r *kgo.Record, limit int) bool { return limit > 0 && recordBytes(r) > limit }

// batchLimit is cl's ProducerBatchMaxBytes (0 if unknown). OptValue finds
// the option by its function's name (runtime.FuncForPC): a hot path reads
// it once, not per record (per record it was about 30% of an SMA job's
// CPU with a Kafka sink).
func batchLimit(cl *kgo.Client) int {
	limit, _ := cl.OptValue(kgo.ProducerBatchMaxBytes).(int32)
	return int(limit)
}

// isTruncated reports a TruncateDeadLetter copy.
func isTruncated(r *kgo.Record) bool {
	for _, h := range r.Headers {
		if h.Key == HeaderDLQTruncated {
			return true
		}
	}
	return false
}
