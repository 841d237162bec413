package mqtt

import (
	"context"
	"errors"
	"fmt"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tflo-io/tflo/streaming"
)

// DeadLetterSink is a streaming.Sink that publishes dead letters
// (streaming.Outputs carrying a streaming.DeadLetter) to a topic on its
// Source's own connection, QoS 1: the payload as it came, the message's
// user properties (forged tflo-* ones dropped) and PropReason,
// PropSourceTopic and PropPacketID. Write returns once the broker
// acknowledged each; a publish lost with the connection returns an error
// wrapping ErrConnectionLost, which the source, handed it by its
// DeadLetterFunc, takes as "redeliver this message". It is a pipeline's
// default dead-letter sink for an MQTT source: the source's
// WithDeadLetters function writes its dead letters to it before the
// message is acknowledged. Flush and Close have nothing to do.
type DeadLetterSink struct {
	src   *Source
	topic string
}

var _ streaming.Sink = (*DeadLetterSink)(nil)

// DeadLetterSink returns the sink publishing dead letters to topic on
// s's connection while s runs. The topic must be a topic name that none
// of s's filters matches.
func (s *Source) DeadLetterSink(topic string) (*DeadLetterSink, error) {
	if errs := s.cfg.validDeadLetterTopic(topic); len(errs) > 0 {
		return nil, fmt.Errorf("mqtt source %q: %w", s.cfg.clientID, errors.Join(errs...))
	}
	return &DeadLetterSink{src: s, topic: topic}, nil
}

// Topic is where the sink publishes.
func (d *DeadLetterSink) Topic() string { return d.topic }

// Write implements streaming.Sink: it publishes each dead letter and
// waits for the broker's PUBACK.
func (d *DeadLetterSink) Write(ctx context.Context, outs []streaming.Output) error {
	for _, o := range outs {
		dl := o.Dead
		if dl == nil {
			return fmt.Errorf("mqtt dead-letter sink %q: output %q of key %s (shard %s) is not a dead letter", d.topic, o.Name, streaming.QuoteKey(o.Key), o.Shard)
		}
		var props []paho.UserProperty
		if len(dl.Headers) > 0 {
			props = make([]paho.UserProperty, len(dl.Headers))
			for i, h := range dl.Headers {
				props[i] = paho.UserProperty{Key: h.Key, Value: string(h.Value)}
			}
		}
		if err := d.src.publishDeadLetter(ctx, d.topic, DeadLetter{Topic: o.Topic, PacketID: dl.PacketID, Payload: dl.Value, Props: props, Cause: dl.Err}); err != nil {
			return fmt.Errorf("mqtt dead-letter sink: %w", err)
		}
	}
	return nil
}

// Flush implements streaming.Sink: Write waited for every PUBACK.
func (d *DeadLetterSink) Flush(context.Context, streaming.ShardID, streaming.CheckpointID) error {
	return nil
}

// Close implements streaming.Sink: the connection is the source's.
func (d *DeadLetterSink) Close(context.Context) error { return nil }
