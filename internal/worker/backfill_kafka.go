package worker

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/streaming"
)

// ReplayedSignal is the payload of an archived signal a backfill replays
// to Kafka: which derived signal it is and its value. The envelope around
// it (kafka.EncodeSignal, header "tflo-envelope: signal/2") carries the
// sensor as key, the mode, and ts as archived (unix nanoseconds).
type ReplayedSignal struct {
	Signal string  `json:"signal"`
	Value  float64 `json:"value"`
}

// ReplayedSignals is the kafka.OutputEncoder of a backfill's kafka: sink:
// one signal envelope per replayed output (an archived row), keyed by
// sensor as the live signal stream is keyed, so one sensor's signals land
// in one partition in archive order.
type ReplayedSignals struct{}

var _ kafka.OutputEncoder = ReplayedSignals{}

// AppendRecords implements kafka.OutputEncoder.
func (ReplayedSignals) AppendRecords(dst []*kgo.Record, outs []streaming.Output) ([]*kgo.Record, error) {
	for _, o := range outs {
		sig := streaming.Signal[streaming.Mode, ReplayedSignal]{Key: o.Key, TS: o.TS, Mode: o.Mode, Payload: ReplayedSignal{Signal: o.Name, Value: o.Value}}
		b, err := kafka.EncodeSignal(sig, nil, 0)
		if err != nil {
			return dst, err
		}
		dst = append(dst, &kgo.Record{Key: []byte(o.Key), Value: b,
			Headers: []kgo.RecordHeader{{Key: kafka.HeaderEnvelope, Value: []byte("signal/" + strconv.Itoa(kafka.EnvelopeVersion))}}})
	}
	return dst, nil
}
