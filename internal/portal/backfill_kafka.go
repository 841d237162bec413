package portal

import (
	"context"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/parquet"
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

// KafkaRowSink publishes replayed archive rows to a Kafka topic keyed by
// sensor id, as the live signal stream is keyed, so one sensor's signals
// land in one partition in archive order. Publishing is asynchronous with
// franz-go's idempotent producer; Flush waits for every record.
type KafkaRowSink struct {
	p *kafka.Publisher
}

var _ activities.RowSink = (*KafkaRowSink)(nil)

// NewKafkaRowSink wraps a connectors/kafka Publisher.
func NewKafkaRowSink(p *kafka.Publisher) *KafkaRowSink { return &KafkaRowSink{p: p} }

// WriteRows implements activities.RowSink.
func (k *KafkaRowSink) WriteRows(ctx context.Context, rows []parquet.Row) error {
	for _, r := range rows {
		sig := streaming.Signal[streaming.Mode, ReplayedSignal]{Key: r.Sensor, TS: r.TS, Mode: streaming.Mode(r.Mode), Payload: ReplayedSignal{Signal: r.Signal, Value: r.Value}}
		if err := kafka.PublishSignal(ctx, k.p, sig, nil, 0); err != nil {
			return err
		}
	}
	return nil
}

// Flush implements activities.RowSink.
func (k *KafkaRowSink) Flush(ctx context.Context) error { return k.p.Flush(ctx) }
