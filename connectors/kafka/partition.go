package kafka

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"

	"github.com/tflo-io/tflo/streaming"
	"github.com/twmb/franz-go/pkg/kgo"
)

// keyState is one key of a partition: its instance and the sequence number
// of the last record that changed it (for incremental cuts).
type keyState struct {
	key string
	in  *streaming.Instance
	mod uint64
}

// partition is one owned partition: its goroutine, keyed state and the two
// checkpointers (durable, and local when configured).
type partition struct {
	s     *Source
	p     Partition
	epoch streaming.Epoch // router epoch at which this member gained p

	// Owned by the partition goroutine (or, once done is closed, by the
	// caller holding inlineMu).
	keyed      *streaming.Keyed[string]
	keys       map[string]*keyState
	seq        uint64 // number of applied records since restore (+1)
	lastOffset int64  // offset of the last applied (or dead-lettered) record, -1 for none
	dec        Decoded
	applied    Applied

	in       chan []*kgo.Record
	cutReq   chan cutRequest
	stop     chan struct{}
	done     chan struct{}
	stopping atomic.Bool
	inlineMu sync.Mutex

	durable, local *cutSource // nil local without a local store
	durableCP      *streaming.Checkpointer
	localCP        *streaming.Checkpointer

	// With WithPartitions: the runtime's handler, and the context its
	// Handle calls get (cancelled by halt).
	h       PartitionHandler
	hctx    context.Context
	hcancel context.CancelFunc
}

type cutRequest struct {
	src   *cutSource
	reply chan cutReply
}

type cutReply struct {
	cut *partCut
	err error
}

func newPartition(s *Source, p Partition, epoch streaming.Epoch) *partition {
	w := &partition{
		s: s, p: p, epoch: epoch,
		keys:       map[string]*keyState{},
		seq:        1,
		lastOffset: -1,
		in:         make(chan []*kgo.Record, s.cfg.queueDepth),
		cutReq:     make(chan cutRequest),
		stop:       make(chan struct{}),
		done:       make(chan struct{}),
	}
	if s.cfg.graph != nil {
		w.keyed = streaming.NewKeyed[string](s.cfg.graph)
		w.dec.Inputs = make([]streaming.Computed, len(s.cfg.graph.Inputs()))
	}
	return w
}

// run is the partition goroutine.
func (w *partition) run() {
	defer close(w.done)
	defer func() {
		// Batches still queued never touch state: count them dropped.
		for {
			select {
			case batch := <-w.in:
				w.s.router.CountDropped(len(batch))
			default:
				return
			}
		}
	}()
	for {
		select {
		case <-w.stop:
			return
		case req := <-w.cutReq:
			cut, err := w.cut(req.src)
			req.reply <- cutReply{cut, err}
		case batch := <-w.in:
			// Fence: nothing reaches state once the partition is no
			// longer owned at our epoch or is being released. Ownership
			// of this partition only ends through release, which sets
			// stopping before anything else, so the router is asked once
			// per batch and the flag once per record.
			if !w.s.router.OwnsAt(w.p, w.epoch) || w.stopping.Load() {
				w.s.router.CountDropped(len(batch))
				continue
			}
			if w.h != nil {
				if err := w.h.Handle(w.hctx, batch); err != nil {
					if w.hctx.Err() == nil {
						w.s.fail(&PartitionError{Partition: w.p, Op: "handle", Err: err})
					}
					return
				}
				w.s.stats.applied.Add(uint64(len(batch)))
				continue
			}
			for i, rec := range batch {
				if w.stopping.Load() {
					w.s.router.CountDropped(len(batch) - i)
					break
				}
				w.apply(rec)
			}
		}
	}
}

// halt stops the goroutine after the record it is applying and waits.
func (w *partition) halt() {
	if w.stopping.CompareAndSwap(false, true) {
		close(w.stop)
		if w.hcancel != nil {
			w.hcancel()
		}
	}
	<-w.done
}

func (w *partition) apply(rec *kgo.Record) {
	s := w.s
	d := &w.dec
	clear(d.Inputs)
	d.Key, d.TS = nil, 0
	if err := s.cfg.decoder.Decode(rec, d); err != nil {
		s.deadLetter(rec, &DecodeError{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Err: err})
		w.lastOffset = rec.Offset
		return
	}
	w.seq++
	var ks *keyState
	if w.keyed != nil {
		ks = w.keys[string(d.Key)]
		if ks == nil {
			key := string(d.Key)
			ks = &keyState{key: key, in: w.keyed.Instance(key)}
			w.keys[key] = ks
		}
		ks.in.Eval(d.TS, d.Inputs...)
		ks.mod = w.seq
	}
	w.lastOffset = rec.Offset
	s.stats.applied.Add(1)
	if s.cfg.onApply != nil {
		a := &w.applied
		*a = Applied{Partition: w.p, Offset: rec.Offset, Epoch: w.epoch, TS: d.TS, Record: rec}
		if ks != nil {
			a.Key, a.Instance = ks.key, ks.in
		} else {
			a.Key = string(d.Key)
		}
		s.cfg.onApply(a)
	}
}

// cut encodes the keys changed since src's last saved cut. It runs on the
// partition goroutine between two records (or inline once it stopped).
func (w *partition) cut(src *cutSource) (*partCut, error) {
	since := src.saved.Load()
	pw := pieceWriter{Limit: w.s.cfg.pieceBytes}
	var blob []byte
	for _, ks := range w.keys {
		if ks.mod <= since {
			continue
		}
		var err error
		if blob, err = ks.in.AppendSave(blob[:0]); err != nil {
			return nil, fmt.Errorf("partition %s: key %q: %w", w.p, ks.key, err)
		}
		pw.Add(ks.key, blob)
	}
	pw.Close()
	c := &partCut{src: src, upTo: w.seq, pieces: pw.Pieces()}
	if w.lastOffset >= 0 {
		c.cursor = streaming.KafkaOffset{Topic: w.p.Topic, Partition: w.p.Partition, Offset: w.lastOffset}.Bytes()
	}
	return c, nil
}

// restore replaces the partition's state with pieces, positioned at
// cursor. Called before the goroutine starts.
func (w *partition) restore(cursorType string, cursor []byte, pieces iter.Seq2[[]byte, error]) error {
	last := int64(-1)
	if len(cursor) > 0 {
		if cursorType != streaming.CursorTypeKafka {
			return fmt.Errorf("partition %s: checkpoint cursor type %q, want %q: %w", w.p, cursorType, streaming.CursorTypeKafka, streaming.ErrCorrupt)
		}
		off, err := streaming.ParseKafkaOffset(cursor)
		if err != nil {
			return fmt.Errorf("partition %s: checkpoint cursor: %w", w.p, err)
		}
		if off.Topic != w.p.Topic || off.Partition != w.p.Partition {
			return fmt.Errorf("partition %s: checkpoint cursor names %s: %w", w.p, off, streaming.ErrCorrupt)
		}
		last = off.Offset
	}
	keys := map[string]*keyState{}
	var keyed *streaming.Keyed[string]
	if w.s.cfg.graph != nil {
		keyed = streaming.NewKeyed[string](w.s.cfg.graph)
	}
	for piece, err := range pieces {
		if err != nil {
			return err
		}
		if err := decodePiece(piece, func(key, blob []byte) error {
			if keyed == nil {
				return fmt.Errorf("partition %s: checkpoint holds state of key %q but the source has no graph", w.p, key)
			}
			ks := keys[string(key)]
			if ks == nil {
				k := string(key)
				ks = &keyState{key: k, in: keyed.Instance(k), mod: 1}
				keys[k] = ks
			}
			if err := ks.in.Load(blob); err != nil {
				return fmt.Errorf("partition %s: key %q: %w", w.p, key, err)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	w.keyed, w.keys, w.seq, w.lastOffset = keyed, keys, 1, last
	return nil
}

// cutSource is the streaming.CheckpointSource of one partition towards one
// store (durable or local). Each remembers the sequence number up to which
// its store holds the partition's keys, so each store gets its own
// incremental cuts.
type cutSource struct {
	w     *partition
	name  string
	saved atomic.Uint64 // keys with mod <= saved are in this store
}

var _ streaming.CheckpointSource = (*cutSource)(nil)
var _ streaming.RunMerger = (*cutSource)(nil)

// Cut asks the partition goroutine for a cut between two records; once the
// goroutine has stopped (a revoke), it cuts inline.
func (c *cutSource) Cut(ctx context.Context) (streaming.Cut, error) {
	w := c.w
	reply := make(chan cutReply, 1)
	select {
	case w.cutReq <- cutRequest{src: c, reply: reply}:
		select {
		case r := <-reply:
			if r.err != nil {
				return nil, r.err
			}
			return r.cut, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	case <-w.done:
		w.inlineMu.Lock()
		defer w.inlineMu.Unlock()
		cut, err := w.cut(c)
		if err != nil {
			return nil, err
		}
		return cut, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Restore implements streaming.CheckpointSource; the partition goroutine
// is not running yet.
func (c *cutSource) Restore(_ context.Context, cursorType string, cursor []byte, pieces iter.Seq2[[]byte, error]) error {
	if err := c.w.restore(cursorType, cursor, pieces); err != nil {
		return err
	}
	c.saved.Store(1)
	return nil
}

// MergeRuns folds runs into one: the newest entry of each key wins.
func (c *cutSource) MergeRuns(ctx context.Context, runs []iter.Seq2[[]byte, error], emit func([]byte) error) error {
	latest := map[string][]byte{}
	var order []string
	for _, run := range runs {
		for piece, err := range run {
			if err != nil {
				return err
			}
			if err := decodePiece(piece, func(key, blob []byte) error {
				k := string(key)
				if _, ok := latest[k]; !ok {
					order = append(order, k)
				}
				latest[k] = append([]byte(nil), blob...)
				return nil
			}); err != nil {
				return err
			}
		}
	}
	pw := pieceWriter{Limit: c.w.s.cfg.pieceBytes}
	for _, k := range order {
		if err := ctx.Err(); err != nil {
			return err
		}
		pw.Add(k, latest[k])
	}
	pw.Close()
	for _, p := range pw.Pieces() {
		if err := emit(p); err != nil {
			return err
		}
	}
	return nil
}

// partCut is a cut of one partition for one store.
type partCut struct {
	src    *cutSource
	upTo   uint64
	cursor []byte
	pieces [][]byte
}

func (c *partCut) Cursor() (string, []byte) { return streaming.CursorTypeKafka, c.cursor }

// Pieces flushes the sinks and dead letters first — every output of a
// record the cut contains must be durable before the state that skips it
// on replay — then emits the encoded pieces.
func (c *partCut) Pieces(ctx context.Context, emit func([]byte) error) error {
	if err := c.src.w.s.flushOutputs(ctx); err != nil {
		return err
	}
	for _, p := range c.pieces {
		if err := emit(p); err != nil {
			return err
		}
	}
	return nil
}

func (c *partCut) Release(saved bool) {
	if saved {
		for {
			old := c.src.saved.Load()
			if old >= c.upTo || c.src.saved.CompareAndSwap(old, c.upTo) {
				break
			}
		}
	}
	c.pieces = nil
}
