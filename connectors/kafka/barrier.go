package kafka

import (
	"context"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// barrier tracks produced records that are not yet acknowledged, by
// generation, so a flush waits for the records produced before it and
// never for the ones produced after it: a checkpoint's flush then ends in
// bounded time however fast the buffer refills (kgo's Client.Flush waits
// until the buffer is empty, which under saturation is never). Safe for
// concurrent use.
type barrier struct {
	mu      sync.Mutex
	gen     uint64         // the generation new records join
	open    map[uint64]int // unacknowledged records per generation
	changed chan struct{}  // closed and replaced when a generation drains
}

func newBarrier() *barrier {
	return &barrier{open: map[uint64]int{}, changed: make(chan struct{})}
}

// add counts one record about to be produced and returns its generation,
// which done must be called with once the record's fate is known.
func (b *barrier) add() uint64 {
	b.mu.Lock()
	g := b.gen
	b.open[g]++
	b.mu.Unlock()
	return g
}

// done uncounts one record of generation g.
func (b *barrier) done(g uint64) {
	b.mu.Lock()
	if b.open[g]--; b.open[g] <= 0 {
		delete(b.open, g)
		close(b.changed)
		b.changed = make(chan struct{})
	}
	b.mu.Unlock()
}

// wait starts a new generation and returns once every record of the
// earlier ones is acknowledged or failed, or ctx ends.
func (b *barrier) wait(ctx context.Context) error {
	b.mu.Lock()
	upTo := b.gen
	b.gen++
	for {
		pending := false
		for g := range b.open {
			if g <= upTo {
				pending = true
				break
			}
		}
		if !pending {
			b.mu.Unlock()
			return nil
		}
		ch := b.changed
		b.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
		b.mu.Lock()
	}
}

// flushBefore waits on b for the records cl produced before the call.
// Meanwhile a kgo Flush runs, only for its side effect: it stops the
// partitions' lingers so buffered records are sent at once; it is
// cancelled as soon as the barrier opens.
func flushBefore(ctx context.Context, cl *kgo.Client, b *barrier) error {
	unlinger, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cl.Flush(unlinger)
	}()
	err := b.wait(ctx)
	cancel()
	<-done
	return err
}
