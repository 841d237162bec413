package memstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/tflo-io/tflo/coordination"
)

// watcher queues events published under the store lock and forwards them
// on its own goroutine, so publishing never blocks on a slow consumer.
type watcher struct {
	ks     coordination.Keyspace
	prefix string
	out    chan coordination.WatchEvent

	mu    sync.Mutex
	queue []coordination.WatchEvent
	// snap counts the snapshot events (SnapshotDone included) still at
	// the front of queue; they do not count against the backlog bound.
	snap   int
	failed error
	wake   chan struct{}

	cancel     context.CancelFunc
	unregister func()
	done       chan struct{}
	err        error
}

var _ coordination.Watcher = (*watcher)(nil)

func newWatcher(ks coordination.Keyspace, prefix string) *watcher {
	return &watcher{
		ks: ks, prefix: prefix,
		out:  make(chan coordination.WatchEvent),
		wake: make(chan struct{}, 1),
		done: make(chan struct{}),
	}
}

// push queues ev; false when the backlog bound broke the watch.
func (w *watcher) push(ev coordination.WatchEvent, maxBacklog int) bool {
	w.mu.Lock()
	if w.failed != nil {
		w.mu.Unlock()
		return false
	}
	if behind := len(w.queue) - w.snap; maxBacklog > 0 && behind >= maxBacklog {
		w.failed = coordination.Retryable("watch", w.ks, w.prefix,
			fmt.Errorf("%w: consumer fell %d events behind", ErrWatchBroken, behind))
		w.queue = nil
		w.mu.Unlock()
		w.signal()
		return false
	}
	w.queue = append(w.queue, ev)
	w.mu.Unlock()
	w.signal()
	return true
}

func (w *watcher) fail(err error) {
	w.mu.Lock()
	if w.failed == nil {
		w.failed = err
		w.queue = nil
	}
	w.mu.Unlock()
	w.signal()
}

func (w *watcher) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

func (w *watcher) run(ctx context.Context) {
	defer close(w.done)
	defer close(w.out)
	defer w.unregister()
	for {
		w.mu.Lock()
		if w.failed != nil {
			w.err = w.failed
			w.mu.Unlock()
			return
		}
		var ev coordination.WatchEvent
		have := len(w.queue) > 0
		fromSnap := w.snap > 0
		if have {
			ev = w.queue[0]
			w.queue[0] = coordination.WatchEvent{}
			w.queue = w.queue[1:]
			if fromSnap {
				w.snap--
			}
		}
		w.mu.Unlock()
		if !have {
			select {
			case <-w.wake:
				continue
			case <-ctx.Done():
				return
			}
		}
		select {
		case w.out <- ev:
		case <-ctx.Done():
			return
		case <-w.wake:
			// A failure may have arrived; re-queue ev at the front.
			w.mu.Lock()
			if w.failed == nil {
				w.queue = append([]coordination.WatchEvent{ev}, w.queue...)
				if fromSnap {
					w.snap++
				}
			}
			w.mu.Unlock()
		}
	}
}

func (w *watcher) Events() <-chan coordination.WatchEvent { return w.out }

func (w *watcher) Err() error { return w.err }

func (w *watcher) Close() error {
	w.cancel()
	<-w.done
	return nil
}
