package central

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tflo-io/tflo/connectors/influx"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/streaming"
)

// Output is one derived signal of one record.
type Output struct {
	Sensor    string
	Signal    string // SignalMean, SignalMin, SignalMax, SignalEpisode
	TS        int64  // event time, unix nanoseconds
	Mode      streaming.Mode
	Value     float64
	Partition int32
	Offset    int64 // source offset of the record
	Epoch     streaming.Epoch
}

// Sink receives derived signals.
//
// Write is called on a partition's goroutine after each record that
// produced outputs (concurrently for different partitions); outs is only
// valid during the call. It may block (back-pressure slows that partition).
// Flush is called by every checkpoint before the state is saved, from a
// checkpoint goroutine: when it returns nil every output written before
// the call is durable. A Write error is remembered by the sink and
// returned by the next Flush, so the checkpoint fails and the cursor does
// not move past outputs that were lost. Close flushes and releases the
// sink; it is called once, after the last Write.
type Sink interface {
	Write(ctx context.Context, outs []Output) error
	Flush(ctx context.Context) error
	Close(ctx context.Context) error
}

// stickyErr remembers the first error.
type stickyErr struct {
	mu  sync.Mutex
	err error
}

func (s *stickyErr) set(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
}

func (s *stickyErr) get() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// InfluxSink writes outputs as Influx points: measurement = signal name,
// tags sensor and (for alarm episodes) mode, field value, timestamp = the
// record's event time. A replayed record overwrites its points.
type InfluxSink struct {
	s *influx.Sink
}

var _ Sink = (*InfluxSink)(nil)

// NewInfluxSink wraps a running connectors/influx Sink.
func NewInfluxSink(s *influx.Sink) *InfluxSink { return &InfluxSink{s: s} }

// Write implements Sink.
func (k *InfluxSink) Write(ctx context.Context, outs []Output) error {
	pts := make([]influx.Point, len(outs))
	fields := make([]influx.Field, len(outs))
	for i, o := range outs {
		fields[i] = influx.Field{Key: "value", Value: streaming.Float(o.Value)}
		pts[i] = influx.Point{Measurement: o.Signal, Sensor: o.Sensor, TS: o.TS, Fields: fields[i : i+1]}
		if o.Signal == SignalEpisode {
			pts[i].Mode = ModeName(o.Mode)
		}
	}
	return k.s.Write(ctx, pts...)
}

// Flush implements Sink.
func (k *InfluxSink) Flush(ctx context.Context) error { return k.s.Flush(ctx) }

// Close implements Sink.
func (k *InfluxSink) Close(ctx context.Context) error { return k.s.Close(ctx) }

// ArchiveSink appends outputs to the Parquet archive: one
// connectors/parquet Writer per partition and owner epoch, so files are
// named by pipeline, partition, epoch and first/last offset. Flush writes
// each writer's buffered rows as one file.
type ArchiveSink struct {
	archive  parquet.Archive
	pipeline string
	opts     []parquet.WriterOption

	mu      sync.Mutex
	writers map[archiveKey]*archiveWriter
	err     stickyErr
}

type archiveKey struct {
	part  int32
	epoch streaming.Epoch
}

type archiveWriter struct {
	mu sync.Mutex
	w  *parquet.Writer
	// dropped: Flush removed this writer from the map; a Write that got
	// it just before must take the new one instead of appending here.
	dropped bool
}

var _ Sink = (*ArchiveSink)(nil)

// NewArchiveSink returns a sink archiving pipeline's outputs into a.
func NewArchiveSink(a parquet.Archive, pipeline string, opts ...parquet.WriterOption) (*ArchiveSink, error) {
	if a == nil {
		return nil, errors.New("archive sink: nil archive")
	}
	if err := (parquet.FileKey{Pipeline: pipeline}).Validate(); err != nil {
		return nil, fmt.Errorf("archive sink: %w", err)
	}
	return &ArchiveSink{archive: a, pipeline: pipeline, opts: opts, writers: map[archiveKey]*archiveWriter{}}, nil
}

func (s *ArchiveSink) writer(k archiveKey) (*archiveWriter, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if w := s.writers[k]; w != nil {
		return w, nil
	}
	pw, err := parquet.NewWriter(s.archive, s.pipeline, k.part, k.epoch, s.opts...)
	if err != nil {
		return nil, err
	}
	w := &archiveWriter{w: pw}
	s.writers[k] = w
	return w, nil
}

// Write implements Sink. All outs come from one record.
func (s *ArchiveSink) Write(ctx context.Context, outs []Output) error {
	if len(outs) == 0 {
		return nil
	}
	var buf [4]parquet.Row
	rows := buf[:0]
	for _, o := range outs {
		rows = append(rows, parquet.Row{Sensor: o.Sensor, Signal: o.Signal, TS: o.TS, Mode: int32(o.Mode), Value: o.Value, Offset: o.Offset})
	}
	for {
		w, err := s.writer(archiveKey{outs[0].Partition, outs[0].Epoch})
		if err != nil {
			s.err.set(err)
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

// Flush implements Sink: every writer writes its buffered rows as one
// file; writers left empty are dropped (a later Write makes a new one).
func (s *ArchiveSink) Flush(ctx context.Context) error {
	if err := s.err.get(); err != nil {
		return err
	}
	s.mu.Lock()
	ws := make(map[archiveKey]*archiveWriter, len(s.writers))
	for k, w := range s.writers {
		ws[k] = w
	}
	s.mu.Unlock()
	var errs []error
	for k, w := range ws {
		w.mu.Lock()
		_, _, err := w.w.Flush(ctx)
		w.mu.Unlock()
		if err != nil {
			errs = append(errs, fmt.Errorf("archive partition %d epoch %d: %w", k.part, uint64(k.epoch), err))
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

// Close implements Sink: it flushes.
func (s *ArchiveSink) Close(ctx context.Context) error { return s.Flush(ctx) }

// sinkSet fans outputs out to several sinks and is the Source's Flusher.
type sinkSet struct {
	sinks []Sink
	err   stickyErr
}

func (m *sinkSet) Write(ctx context.Context, outs []Output) {
	for _, s := range m.sinks {
		if err := s.Write(ctx, outs); err != nil {
			m.err.set(err)
		}
	}
}

func (m *sinkSet) Flush(ctx context.Context) error {
	if err := m.err.get(); err != nil {
		return fmt.Errorf("an earlier sink write failed: %w", err)
	}
	var errs []error
	for _, s := range m.sinks {
		if err := s.Flush(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (m *sinkSet) Close(ctx context.Context) error {
	var errs []error
	for _, s := range m.sinks {
		if err := s.Close(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
