package pipeline

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"go.temporal.io/sdk/client"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/streaming"
)

// pinger is a sink that can tell whether its server answers (the InfluxDB
// and Kafka sinks); Ready asks it.
type pinger interface {
	Ping(ctx context.Context) error
}

// Ready reports whether the worker serves its pipeline: nil when it runs,
// is not stopping (Run's context ended or Close was called: it drains)
// and has not failed, its source has given it its shards and each is
// restored (Kafka: the group gave the worker its assignment, none when
// it has more members than the topic has partitions, and has not taken
// it back by a lost session, and every owned partition is open; MQTT: the one shard is open, and the source is
// connected to its broker and subscribed on that connection: a worker
// whose broker is down is not ready until it reconnects and subscribes),
// Temporal answers a health check (when configured) and every sink that
// can be asked answers (the Kafka and InfluxDB sinks, the dead-letter
// sink included). Otherwise the error says what is missing. It is what a
// worker's /readyz serves; safe to call from any goroutine while Run
// runs.
func (w *Worker) Ready(ctx context.Context) error {
	if !w.running.Load() {
		return errors.New("not running yet")
	}
	select {
	case <-w.done:
		return errors.New("stopped")
	default:
	}
	if err := w.Err(); err != nil {
		return err
	}
	// Run's context ended: the worker drains. A Kafka source leaves the
	// group and releases every partition, after which the checks below
	// find every owned partition (none) restored: it serves nothing.
	if p := w.stopping.Load(); p != nil && chanClosed(*p) {
		return errors.New("stopping: the source is releasing its shards and the worker drains")
	}
	switch {
	case w.kafka != nil:
		st := w.kafka.src.Stats()
		if !st.Assigned { // not the epoch: a member assigned nothing has none, and serves
			return errors.New("kafka source: no partitions assigned yet (joining the group, or rejoining after a lost session)")
		}
		owned := w.kafka.src.Router().Owned()
		if missing := unrestored(owned, w.host.heldShards()); len(missing) > 0 {
			return fmt.Errorf("kafka source: %d of %d owned partitions restored; not yet: %s",
				len(owned)-len(missing), len(owned), strings.Join(missing, ", "))
		}
	case w.mqtt != nil:
		if w.mqtt.cur.Load() == nil {
			return errors.New("mqtt source: shard not restored yet")
		}
		if err := w.mqtt.linkErr(); err != nil {
			return err
		}
	}
	if tc := w.o.tc; tc != nil {
		if _, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
			return fmt.Errorf("temporal: %w", err)
		}
	}
	var errs []error
	for i, s := range w.sinks.sinks {
		if p, ok := s.(pinger); ok {
			if err := p.Ping(ctx); err != nil {
				errs = append(errs, fmt.Errorf("sinks[%d]: %w", i, err))
			}
		}
	}
	// The dead-letter sink too: a dead letter it cannot take fails the
	// shard's next checkpoint, as an output sink's failed write does.
	if w.dead != nil {
		if p, ok := w.dead.sinks[0].(pinger); ok {
			if err := p.Ping(ctx); err != nil {
				errs = append(errs, fmt.Errorf("dead-letter sink: %w", err))
			}
		}
	}
	return errors.Join(errs...)
}

// unrestored names, sorted, the owned partitions with no shard held for
// their current ownership: none held, or one left from an earlier one (an
// epoch before the partition was gained again; a shard's epoch is the
// assignment's or one claimed past it). Counting would not do: a revoked
// partition's shard still held for its final checkpoint would stand in
// for a gained one not yet open.
func unrestored(owned map[kafka.Partition]streaming.Epoch, held []*shard) []string {
	byID := make(map[streaming.ShardID]streaming.Epoch, len(held))
	for _, s := range held {
		byID[s.id] = s.epoch
	}
	var out []string
	for p, gained := range owned {
		id := streaming.KafkaShard(p.Topic, p.Partition)
		if e, ok := byID[id]; !ok || e < gained {
			out = append(out, string(id))
		}
	}
	slices.Sort(out)
	return out
}
