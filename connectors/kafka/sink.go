package kafka

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/internal/lograte"
	"github.com/tflo-io/tflo/streaming"
)

// OutputEncoder turns a pipeline's outputs into Kafka records.
// AppendRecords is called with the outputs of one or more input records
// of one shard, in record order (the outputs of one input record are
// adjacent and share Key, Offset and TS); it may be called concurrently.
type OutputEncoder interface {
	AppendRecords(dst []*kgo.Record, outs []streaming.Output) ([]*kgo.Record, error)
}

// OutputSink is the streaming.Sink publishing a pipeline's outputs to a
// Kafka topic, keyed by the outputs' key (so one key's records stay in
// order in one partition), encoded by an OutputEncoder. Flush (a
// checkpoint's pre-commit) waits for the records published before it.
// An output whose value is NaN or infinite (JSON has no such number) is
// dropped, counted (Dropped) and logged (sampled: the first lines of
// every interval, internal/lograte), and the other outputs are
// published: one bad value never fails the batch or a checkpoint. Safe
// for concurrent use.
type OutputSink struct {
	publisherSink
	enc     OutputEncoder
	dropped atomic.Uint64
	dropLog *lograte.Limiter // an operator emitting NaN for every record would log a line each
}

var _ streaming.Sink = (*OutputSink)(nil)

// NewOutputSink publishes with pub (which the sink closes) in enc's
// format.
func NewOutputSink(pub *Publisher, enc OutputEncoder) *OutputSink {
	return &OutputSink{publisherSink: publisherSink{pub}, enc: enc, dropLog: lograte.New()}
}

// Write implements streaming.Sink; it blocks while the publisher's
// buffer is full.
func (s *OutputSink) Write(ctx context.Context, outs []streaming.Output) error {
	outs = s.dropNonFinite(outs)
	recs, err := s.enc.AppendRecords(nil, outs)
	if err != nil {
		return err
	}
	for _, r := range recs {
		if err := s.pub.Publish(ctx, string(r.Key), r.Value, r.Headers...); err != nil {
			return err
		}
	}
	return nil
}

// publisherSink is the Flush and Close of a sink that writes through a
// Publisher it owns.
type publisherSink struct{ pub *Publisher }

// Ping reports whether the sink's brokers answer (Publisher.Ping): a
// worker's readiness asks its output and dead-letter sinks.
func (s publisherSink) Ping(ctx context.Context) error { return s.pub.Ping(ctx) }

// Flush implements streaming.Sink: it waits for what was published.
func (s publisherSink) Flush(ctx context.Context, _ streaming.ShardID, _ streaming.CheckpointID) error {
	return s.pub.Flush(ctx)
}

// Close implements streaming.Sink: it flushes and closes the publisher.
func (s publisherSink) Close(ctx context.Context) error {
	s.pub.stopAccepting() // a Write racing the drain is refused, not lost
	err := s.pub.Flush(ctx)
	s.pub.Close()
	return err
}

// dropNonFinite returns outs without the outputs whose value is not
// finite, counting and logging each (outs is copied only when one is
// dropped).
func (s *OutputSink) dropNonFinite(outs []streaming.Output) []streaming.Output {
	i := slices.IndexFunc(outs, nonFinite)
	if i < 0 {
		return outs
	}
	kept := append([]streaming.Output(nil), outs[:i]...)
	for _, o := range outs[i:] {
		if !nonFinite(o) {
			kept = append(kept, o)
			continue
		}
		s.dropped.Add(1)
		if ok, skipped := s.dropLog.Allow(); ok {
			s.pub.cfg.log.Warn("kafka sink: output dropped: its value is not finite", lograte.With(skipped,
				"topic", s.pub.cfg.topic, "output", o.Name, "key", streaming.QuoteKey(o.Key), "value", o.Value, "shard", o.Shard, "offset", o.Offset)...)
		}
	}
	return kept
}

func nonFinite(o streaming.Output) bool { return math.IsNaN(o.Value) || math.IsInf(o.Value, 0) }

// Dropped returns how many outputs the sink dropped because their value
// was not finite.
func (s *OutputSink) Dropped() uint64 { return s.dropped.Load() }

// Produced returns how many records the sink's publisher delivered.
func (s *OutputSink) Produced() uint64 { return s.pub.Produced() }

// DeadLetterSink is the streaming.Sink writing a pipeline's dead letters
// (Outputs carrying a streaming.DeadLetter) to its publisher's topic, each
// as DeadLetter's record: the original key, value and headers, plus the
// tflo-dlq-* headers naming the source topic, partition, offset, group
// and error (and, from an MQTT source, the packet id); truncated when too
// large for the broker (ProduceDeadLetter).
// Flush (a checkpoint's pre-commit) waits for the dead letters written
// before it, and fails once one was lost. An Output that is not a dead
// letter is refused. Safe for concurrent use.
type DeadLetterSink struct{ publisherSink }

var _ streaming.Sink = (*DeadLetterSink)(nil)

// NewDeadLetterSink writes dead letters with pub (which the sink closes)
// to pub's topic.
func NewDeadLetterSink(pub *Publisher) *DeadLetterSink { return &DeadLetterSink{publisherSink{pub}} }

// Write implements streaming.Sink.
func (s *DeadLetterSink) Write(ctx context.Context, outs []streaming.Output) error {
	for _, o := range outs {
		d := o.Dead
		if d == nil {
			return fmt.Errorf("kafka dead-letter sink %q: output %q of key %s (shard %s, offset %d) is not a dead letter",
				s.pub.cfg.topic, o.Name, streaming.QuoteKey(o.Key), o.Shard, o.Offset)
		}
		rec := &kgo.Record{Topic: o.Topic, Partition: d.Partition, Offset: o.Offset, Key: d.Key, Value: d.Value, Timestamp: time.Unix(0, o.TS)}
		if len(d.Headers) > 0 {
			rec.Headers = make([]kgo.RecordHeader, len(d.Headers))
			for i, h := range d.Headers {
				rec.Headers[i] = kgo.RecordHeader{Key: h.Key, Value: h.Value}
			}
		}
		dl := DeadLetter(s.pub.cfg.topic, d.Group, rec, d.Err)
		if d.PacketID != 0 {
			dl.Headers = append(dl.Headers, kgo.RecordHeader{Key: HeaderDLQPacketID, Value: strconv.AppendUint(nil, uint64(d.PacketID), 10)})
		}
		if err := s.pub.PublishDeadLetter(ctx, dl); err != nil {
			return err
		}
	}
	return nil
}

// Produced returns how many dead letters the sink delivered, and Failed
// how many were lost (one dropped because even truncated it was too large
// for the broker included, though it fails no Flush).
func (s *DeadLetterSink) Produced() uint64 { return s.pub.Produced() }
func (s *DeadLetterSink) Failed() uint64   { return s.pub.Failed() }

// JSONOutputs encodes each output as one JSON record keyed by the
// output's key:
//
//	{"key":"s-1","name":"sma","ts":1700000000000,"value":21.5}
//
// ts is in the input records' time unit (the output's nanoseconds divided
// by Scale); a signal's mode is added as "mode": its name when Modes
// names it (mode 0 included), else its number when it is not 0.
type JSONOutputs struct {
	Scale int64 // nanoseconds per unit of the records' ts (1e6 for ms); 0 means 1
	Modes streaming.ModeNames
}

// AppendRecords implements OutputEncoder.
func (e JSONOutputs) AppendRecords(dst []*kgo.Record, outs []streaming.Output) ([]*kgo.Record, error) {
	scale := max(e.Scale, 1)
	for _, o := range outs {
		b := make([]byte, 0, 96+len(o.Key)+len(o.Name))
		b = append(b, `{"key":`...)
		b = appendJSONString(b, o.Key)
		b = append(b, `,"name":`...)
		b = appendJSONString(b, o.Name)
		b = append(b, `,"ts":`...)
		b = strconv.AppendInt(b, o.TS/scale, 10)
		b = append(b, `,"value":`...)
		v, err := json.Marshal(o.Value)
		if err != nil {
			return dst, fmt.Errorf("output %q of key %q: %w", o.Name, o.Key, err)
		}
		b = append(b, v...)
		// Mode 0 is a named signal's mode too (a hysteresis' low); only
		// an output whose modes are not named leaves it out.
		if name, ok := modeName(e.Modes, o); ok {
			b = append(b, `,"mode":`...)
			b = appendJSONString(b, name)
		} else if o.Mode != 0 {
			b = append(b, `,"mode":`...)
			b = strconv.AppendInt(b, int64(o.Mode), 10)
		}
		b = append(b, '}')
		dst = append(dst, &kgo.Record{Key: []byte(o.Key), Value: b})
	}
	return dst, nil
}

func modeName(m streaming.ModeNames, o streaming.Output) (string, bool) {
	if m == nil {
		return "", false
	}
	return m(o.Name, o.Mode)
}

func appendJSONString(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(b, q...)
}

// PayloadField is one field of a SignalEnvelopes payload: Name in the
// JSON object, From the output whose value it carries, or "$topic" for
// the topic the input record came from.
type PayloadField struct {
	Name string
	From string
}

// SignalEnvelopes encodes one signal envelope (EncodeSignal, header
// tflo-envelope) per input record whose Trigger output emitted: key = the
// record's key, ts = its event time in the records' unit, mode = the
// trigger's mode name (Modes, else its number), payload = a JSON object of
// the Payload fields in order (fields whose output did not emit are left
// out), epoch = the shard's owner epoch, source = the input record when
// it came from a Kafka partition. The iot-portal edge publishes its
// alarms this way.
type SignalEnvelopes struct {
	Trigger string
	Modes   map[streaming.Mode]string
	Payload []PayloadField
	Scale   int64 // as JSONOutputs.Scale
}

// AppendRecords implements OutputEncoder.
func (e SignalEnvelopes) AppendRecords(dst []*kgo.Record, outs []streaming.Output) ([]*kgo.Record, error) {
	scale := max(e.Scale, 1)
	for i := 0; i < len(outs); {
		j := i + 1
		for j < len(outs) && outs[j].Key == outs[i].Key && outs[j].Offset == outs[i].Offset && outs[j].TS == outs[i].TS {
			j++
		}
		rec := outs[i:j]
		i = j
		var trig *streaming.Output
		for k := range rec {
			if rec[k].Name == e.Trigger {
				trig = &rec[k]
			}
		}
		if trig == nil {
			continue
		}
		payload := []byte{'{'}
		for _, f := range e.Payload {
			var v []byte
			if f.From == "$topic" {
				v = appendJSONString(nil, trig.Topic)
			} else {
				for _, o := range rec {
					if o.Name == f.From {
						b, err := json.Marshal(o.Value)
						if err != nil {
							return dst, fmt.Errorf("signal of key %q: payload field %q: %w", trig.Key, f.Name, err)
						}
						v = b
					}
				}
			}
			if v == nil {
				continue
			}
			if len(payload) > 1 {
				payload = append(payload, ',')
			}
			payload = appendJSONString(payload, f.Name)
			payload = append(payload, ':')
			payload = append(payload, v...)
		}
		payload = append(payload, '}')
		mode, ok := e.Modes[trig.Mode]
		if !ok {
			mode = strconv.Itoa(int(trig.Mode))
		}
		sig := streaming.Signal[string, json.RawMessage]{Key: trig.Key, TS: trig.TS / scale, Mode: mode, Payload: payload}
		// The envelope's epoch is that of its source position, for
		// consumers that drop a replay's duplicates: an output of a shard
		// without one (MQTT) carries neither.
		var src *EnvelopeSource
		var epoch streaming.Epoch
		if topic, part, err := trig.Shard.KafkaPartition(); err == nil {
			src, epoch = &EnvelopeSource{Topic: topic, Partition: part, Offset: trig.Offset}, trig.Epoch
		}
		b, err := EncodeSignal(sig, src, epoch)
		if err != nil {
			return dst, err
		}
		dst = append(dst, &kgo.Record{Key: []byte(trig.Key), Value: b,
			Headers: []kgo.RecordHeader{{Key: HeaderEnvelope, Value: []byte("signal/" + strconv.Itoa(EnvelopeVersion))}}})
	}
	return dst, nil
}
