package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
)

// chunkRecords is how many records a shard applies under one hold of its
// lock (and one keyed-state Process call): a cut waits for at most one
// chunk.
const chunkRecords = 256

// kafkaRunner runs a KafkaSource: a consumer-group member whose
// partitions are the pipeline's shards (it is the Source's Partitions).
type kafkaRunner struct {
	w   *Worker
	cfg *KafkaSource
	src *kafka.Source
}

var _ kafka.Partitions = (*kafkaRunner)(nil)

func (w *Worker) newKafkaRunner(cfg *KafkaSource) (*kafkaRunner, error) {
	r := &kafkaRunner{w: w, cfg: cfg}
	opts := []kafka.SourceOption{
		kafka.WithBrokers(cfg.Brokers...),
		kafka.WithGroup(cfg.Group),
		kafka.WithTopics(cfg.Topic),
		kafka.WithPartitions(r),
		kafka.WithRevokeTimeout(cfg.RevokeTimeout),
		kafka.WithSessionTimeout(cfg.SessionTimeout),
		kafka.WithRebalanceTimeout(cfg.RebalanceTimeout),
		kafka.WithSecurity(cfg.Security),
		kafka.WithLogger(w.log),
		kafka.WithClientOptions(cfg.ClientOptions...),
	}
	if cfg.StaticMembership != nil && *cfg.StaticMembership && w.o.workerIDGiven {
		opts = append(opts, kafka.WithInstanceID(w.o.workerID))
	}
	src, err := kafka.NewSource(opts...)
	if err != nil {
		return nil, err
	}
	r.src = src
	return r, nil
}

func (r *kafkaRunner) run(ctx context.Context) error { return r.src.Run(ctx) }

// Open implements kafka.Partitions: it restores the partition's shard and
// resumes after the checkpoint's offset.
func (r *kafkaRunner) Open(ctx context.Context, a kafka.Assignment) (kafka.PartitionHandler, int64, error) {
	w := r.w
	id := streaming.KafkaShard(a.Partition.Topic, a.Partition.Partition)
	router := r.src.Router()
	// The shard's epoch is the assignment's, or one claimed past it
	// (claimGroupEpoch), known once openShard returns; ownership is the
	// assignment's.
	var epoch atomic.Uint64
	epoch.Store(uint64(a.Epoch))
	owner := streaming.OwnershipFunc(func() (streaming.Epoch, bool) {
		since, ok := router.GainedAt(a.Partition)
		return streaming.Epoch(epoch.Load()), ok && since == a.Epoch
	})
	s, err := w.openShard(ctx, id, a.Epoch, a.TopicPartitions, nil, a.Cursors, owner)
	if err != nil {
		return nil, 0, err
	}
	epoch.Store(uint64(s.epoch))
	last := int64(-1)
	if typ, cur := s.rt.Cursor(); len(cur) > 0 {
		off, err := streaming.ParseKafkaOffset(cur)
		switch {
		case typ != streaming.CursorTypeKafka || err != nil:
			s.close()
			return nil, 0, fmt.Errorf("shard %s: checkpoint cursor %s:%x is not a Kafka offset: %w", id, typ, cur, streaming.ErrCorrupt)
		case off.Topic != a.Partition.Topic || off.Partition != a.Partition.Partition:
			s.close()
			return nil, 0, fmt.Errorf("shard %s: checkpoint cursor names %s: %w", id, off, streaming.ErrCorrupt)
		}
		last = off.Offset
	}
	if a.Cursors != nil {
		r.checkGroupOffset(ctx, id, a.Cursors, last)
	}
	h := &kafkaShard{shard: s, a: a, last: last}
	w.host.gained(s)
	return h, last, nil
}

// checkGroupOffset compares the offset a gained shard resumes after
// (last, -1 when nothing was restored) with the group's committed offset,
// and warns when the group committed past it: the durable store lacks
// checkpoints that another worker made and committed (its own Badger as
// state.durable, with more than one worker), or lost them, or the group's
// offsets were moved forward. The state stays consistent, as the records
// between are replayed, but their outputs are written again. The group's
// offset is only compared, never resumed from: the checkpoint is the truth.
func (r *kafkaRunner) checkGroupOffset(ctx context.Context, id streaming.ShardID, cursors streaming.CursorStore, last int64) {
	rec, err := cursors.LoadCursor(ctx, []byte(id))
	if err != nil {
		if !errors.Is(err, streaming.ErrNotFound) {
			r.w.log.Info("could not compare the restored checkpoint with the group's committed offset", "shard", id, "err", err)
		}
		return
	}
	off, err := streaming.ParseKafkaOffset(rec.Cursor)
	if err != nil || off.Offset <= last {
		return
	}
	r.w.m.behindGroup.Add(1)
	restored := "none"
	if last >= 0 {
		restored = fmt.Sprint(last)
	}
	r.w.log.Warn("shard restored behind its group's committed offset: the records between are replayed and their outputs written again",
		"shard", id, "group", r.cfg.Group, "restored_offset", restored, "committed_offset", off.Offset, "replayed", off.Offset-last,
		"hint", "the durable store lacks checkpoints the group committed: give every worker of the pipeline one state.durable (a shared dir or S3; a worker's own Badger is read by no other) or run one worker")
}

// kafkaShard is one owned partition's handler.
type kafkaShard struct {
	*shard
	a    kafka.Assignment
	last int64 // offset of the last record applied or dead-lettered (-1: none)
}

// Handle applies a fetched batch, one chunk at a time.
func (k *kafkaShard) Handle(ctx context.Context, recs []*kgo.Record) error {
	for len(recs) > 0 {
		n := min(len(recs), chunkRecords)
		if err := k.apply(ctx, recs[:n]); err != nil {
			return err
		}
		recs = recs[n:]
		if ctx.Err() != nil {
			return nil // being released: the rest is replayed by the next owner
		}
	}
	return nil
}

// apply runs a chunk through the keyed state under the shard lock and
// writes its outputs before releasing it. ctx ends when the partition is
// being released: a sink waiting for room then gives up, and the chunk
// fails part-way (its outputs are not all written; the cut refuses it).
func (k *kafkaShard) apply(ctx context.Context, recs []*kgo.Record) error {
	s, w := k.shard, k.w
	s.mu.Lock()
	defer s.mu.Unlock()
	s.outs, s.dead = s.outs[:0], s.dead[:0]
	var applied uint64
	var maxTS int64
	err := s.rt.Process(func(tx *keyedstate.Tx[string]) error {
		for _, r := range recs {
			clear(s.rec.Inputs)
			s.rec.Key, s.rec.TS = nil, 0
			if err := w.c.dec.Decode(Message{Topic: r.Topic, Key: r.Key, Value: r.Value}, &s.rec); err != nil {
				s.dead = k.appendDead(s.dead, r, &kafka.DecodeError{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Err: err})
				k.last = r.Offset
				continue
			}
			key := string(s.rec.Key)
			inst, err := tx.Eval(key, s.rec.TS, s.rec.Inputs...)
			if errors.Is(err, keyedstate.ErrTooManyKeys) {
				// A new key over state.max_keys: its record is dead-lettered,
				// saying so (it decoded: not a DecodeError).
				w.m.keysRefused.Add(1)
				s.dead = k.appendDead(s.dead, r, fmt.Errorf("record %s/%d@%d over state.max_keys: %w", r.Topic, r.Partition, r.Offset, err))
				k.last = r.Offset
				continue
			}
			if errors.Is(err, keyedstate.ErrKeyTooLong) {
				// A key longer than the keyed state stores (limits.max_key_bytes
				// let it through): failing the shard would fail it again at
				// every replay of the record.
				s.dead = k.appendDead(s.dead, r, err)
				k.last = r.Offset
				continue
			}
			if err != nil {
				return fmt.Errorf("shard %s, record at offset %d, key %q: %w", s.id, r.Offset, key, err)
			}
			ts := s.rec.TS * w.c.scale
			maxTS = max(maxTS, ts)
			s.outs = w.c.appendOutputs(s.outs, inst, streaming.Output{Shard: s.id, Epoch: s.epoch, Offset: r.Offset, Topic: r.Topic, Key: key, TS: ts})
			k.last = r.Offset
			applied++
		}
		tx.SetCursor(streaming.CursorTypeKafka, streaming.KafkaOffset{Topic: k.a.Partition.Topic, Partition: k.a.Partition.Partition, Offset: k.last}.Bytes())
		return nil
	})
	if err != nil {
		s.failed = err // s.mu held
		return err
	}
	if err := w.sinks.write(ctx, s.outs); err != nil {
		s.failed = fmt.Errorf("shard %s: %w", s.id, err)
		return s.failed
	}
	if err := w.deadLetter(ctx, s.dead); err != nil {
		s.failed = fmt.Errorf("shard %s: %w", s.id, err)
		return s.failed
	}
	w.m.applied(s, applied, uint64(len(s.outs)), maxTS)
	return nil
}

// appendDead appends the dead letter of r, which failed with err (which
// names the record).
func (k *kafkaShard) appendDead(dst []streaming.Output, r *kgo.Record, err error) []streaming.Output {
	d := &streaming.DeadLetter{Key: r.Key, Value: r.Value, Partition: r.Partition, Group: k.w.kafka.cfg.Group, Err: err}
	if len(r.Headers) > 0 {
		d.Headers = make([]streaming.Header, len(r.Headers))
		for i, h := range r.Headers {
			d.Headers[i] = streaming.Header{Key: h.Key, Value: h.Value}
		}
	}
	return append(dst, streaming.Output{Shard: k.id, Epoch: k.epoch, Offset: r.Offset, Topic: r.Topic, Key: string(r.Key),
		TS: r.Timestamp.UnixNano(), Dead: d})
}

// Release ends the partition: on a revoke its final checkpoint, then the
// shard is handed back. From the start no other checkpoint cuts the shard
// (shard.final): a round's checkpoint waiting for the final one, or
// coming after it while the shard closes, is refused as not held.
func (k *kafkaShard) Release(ctx context.Context, final bool) error {
	k.mu.Lock()
	k.final = true
	k.mu.Unlock()
	var err error
	if final { // refused by the cut after a chunk that failed part-way (shardSource.Cut)
		// The last checkpoint here publishes every archived row: its cut
		// rolls the archive's open file. Rolled now, a checkpoint already
		// cut (a round's) would take the roll at its older cut.
		if _, err = k.cp.Checkpoint(finalCheckpointContext(ctx)); err != nil {
			err = fmt.Errorf("final checkpoint of shard %s: %w", k.id, err)
		}
		k.finalDone = err == nil
	}
	k.w.host.lost(k.shard)
	k.close()
	k.w.dropState(k.id)
	return err
}

// kafkaStats are the consumer's counters.
func (r *kafkaRunner) stats() sourceStats {
	st := r.src.Stats()
	return sourceStats{DeadLettered: r.w.deadLettered.Load(), DeadLetterErrors: r.w.deadLetterErrors(), Dropped: st.Dropped, Owned: st.Owned}
}

// sourceStats are a source's counters for the metrics.
type sourceStats struct {
	DeadLettered, DeadLetterErrors, Dropped uint64
	Duplicates                              uint64 // MQTT redeliveries dropped by the dedup window
	Owned                                   int
}
