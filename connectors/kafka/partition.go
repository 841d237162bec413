package kafka

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/tflo-io/tflo/streaming"
	"github.com/twmb/franz-go/pkg/kgo"
)

// partition is one owned partition: its goroutine, which hands the
// partition's fetched batches to the runtime's handler.
type partition struct {
	s     *Source
	p     Partition
	epoch streaming.Epoch // router epoch at which this member gained p

	h          PartitionHandler
	lastOffset int64 // offset the restored state ends at (-1: none): where fetching resumes
	// regained: the member owned p before this ownership (Source.hand).
	regained bool

	// hwm is the partition's high watermark as the last fetch saw it
	// (-1: no fetch yet); next is the offset after the last record handed
	// to the handler. Their difference is the consumer lag (Source.Lag).
	hwm, next atomic.Int64

	hctx     context.Context // what Handle gets: ended by halt
	hcancel  context.CancelFunc
	in       chan []*kgo.Record
	stop     chan struct{}
	done     chan struct{}
	stopping atomic.Bool
	haltOnce sync.Once
}

func newPartition(s *Source, p Partition, epoch streaming.Epoch, h PartitionHandler, last int64) *partition {
	hctx, hcancel := context.WithCancel(context.Background())
	w := &partition{
		s: s, p: p, epoch: epoch, h: h, lastOffset: last,
		hctx: hctx, hcancel: hcancel,
		in:   make(chan []*kgo.Record, s.cfg.queueDepth),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	w.hwm.Store(-1)
	w.next.Store(last + 1)
	return w
}

// run is the partition goroutine.
func (w *partition) run() {
	defer close(w.done)
	defer func() {
		// Batches still queued never reach the handler: count them dropped.
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
		case batch := <-w.in:
			// Fence: nothing reaches the handler once the partition is no
			// longer owned at our epoch or is being released.
			if !w.s.router.OwnsAt(w.p, w.epoch) || w.stopping.Load() {
				w.s.router.CountDropped(len(batch))
				continue
			}
			if err := w.h.Handle(w.hctx, batch); err != nil {
				if w.hctx.Err() == nil {
					w.s.fail(&PartitionError{Partition: w.p, Op: "handle", Err: err})
				}
				return
			}
			w.s.stats.handed.Add(uint64(len(batch)))
			w.next.Store(batch[len(batch)-1].Offset + 1)
		}
	}
}

// halt stops the goroutine after the batch it is handing over (whose
// Handle sees its context end) and waits for it.
func (w *partition) halt() {
	w.haltOnce.Do(func() {
		w.stopping.Store(true)
		close(w.stop)
		w.hcancel()
	})
	<-w.done
}
