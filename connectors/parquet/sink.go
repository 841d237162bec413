package parquet

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tflo-io/tflo/streaming"
)

// RowOf is the archive row of one output.
func RowOf(o streaming.Output) Row {
	return Row{Sensor: o.Key, Signal: o.Name, TS: o.TS, Mode: int32(o.Mode), Value: o.Value, Offset: o.Offset}
}

// Output is the output an archived row was made from (RowOf's inverse;
// the shard, epoch and topic are not archived and stay zero).
func (r Row) Output() streaming.Output {
	return streaming.Output{Key: r.Sensor, Name: r.Signal, TS: r.TS, Mode: streaming.Mode(r.Mode), Value: r.Value, Offset: r.Offset}
}

// shardNumber is the archive's shard number of a pipeline shard: the
// partition of a Kafka shard, 0 for a source without partitions.
func shardNumber(id streaming.ShardID) int32 {
	if _, p, err := id.KafkaPartition(); err == nil {
		return p
	}
	return 0
}

// Sink is the streaming.Sink archiving a pipeline's outputs: one Writer
// per shard and owner epoch, so files are named by pipeline, partition,
// epoch and first/last offset. Flush (a checkpoint's pre-commit) writes
// the shard's buffered rows as one file; files are visible once written.
//
// Write is called from shards' goroutines and Flush from checkpoints;
// the sink locks accordingly.
type Sink struct {
	archive  Archive
	pipeline string
	opts     []WriterOption

	mu      sync.Mutex
	writers map[sinkKey]*sinkWriter
	err     error // first failed Write: returned by every later Flush
}

type sinkKey struct {
	shard streaming.ShardID
	epoch streaming.Epoch
}

type sinkWriter struct {
	mu sync.Mutex
	w  *Writer
	// dropped: Flush removed this writer from the map; a Write that got
	// it just before must take the new one instead of appending here.
	dropped bool
}

var _ streaming.Sink = (*Sink)(nil)

// NewSink returns a sink archiving pipeline's outputs into a.
func NewSink(a Archive, pipeline string, opts ...WriterOption) (*Sink, error) {
	if a == nil {
		return nil, errors.New("archive sink: nil archive")
	}
	if err := (FileKey{Pipeline: pipeline}).Validate(); err != nil {
		return nil, fmt.Errorf("archive sink: %w", err)
	}
	return &Sink{archive: a, pipeline: pipeline, opts: opts, writers: map[sinkKey]*sinkWriter{}}, nil
}

func (s *Sink) writer(k sinkKey) (*sinkWriter, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.writers[k]; w != nil {
		return w, nil
	}
	pw, err := NewWriter(s.archive, s.pipeline, shardNumber(k.shard), k.epoch, s.opts...)
	if err != nil {
		return nil, err
	}
	w := &sinkWriter{w: pw}
	s.writers[k] = w
	return w, nil
}

func (s *Sink) fail(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

// Write implements streaming.Sink. All outs come from one shard.
func (s *Sink) Write(ctx context.Context, outs []streaming.Output) error {
	if len(outs) == 0 {
		return nil
	}
	rows := make([]Row, len(outs))
	for i, o := range outs {
		rows[i] = RowOf(o)
	}
	for {
		w, err := s.writer(sinkKey{outs[0].Shard, outs[0].Epoch})
		if err != nil {
			s.fail(err)
			return err
		}
		w.mu.Lock()
		if w.dropped { // a concurrent Flush retired it: rows appended here would be lost
			w.mu.Unlock()
			continue
		}
		// On error (a full buffer whose file could not be written) the rows
		// stay buffered and the next Flush retries and reports: not sticky.
		_ = w.w.Append(ctx, rows...)
		w.mu.Unlock()
		return nil
	}
}

// Flush implements streaming.Sink: every writer of shard (every writer
// for shard "") writes its buffered rows as one file; writers left empty
// are dropped (a later Write makes a new one).
func (s *Sink) Flush(ctx context.Context, shard streaming.ShardID, _ streaming.CheckpointID) error {
	s.mu.Lock()
	if err := s.err; err != nil {
		s.mu.Unlock()
		return err
	}
	ws := make(map[sinkKey]*sinkWriter, len(s.writers))
	for k, w := range s.writers {
		if shard == "" || k.shard == shard {
			ws[k] = w
		}
	}
	s.mu.Unlock()
	var errs []error
	for k, w := range ws {
		w.mu.Lock()
		_, _, err := w.w.Flush(ctx)
		w.mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("archive shard %s epoch %d: %w", k.shard, uint64(k.epoch), err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	s.mu.Lock()
	for k, w := range ws {
		w.mu.Lock()
		if w.w.Pending() == 0 && s.writers[k] == w {
			delete(s.writers, k)
			w.dropped = true
		}
		w.mu.Unlock()
	}
	s.mu.Unlock()
	return nil
}

// Close implements streaming.Sink: it flushes every shard.
func (s *Sink) Close(ctx context.Context) error { return s.Flush(ctx, "", 0) }
