package natskv

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/tflo-io/tflo/coordination"
)

// ErrConnectionLost is the cause of the Retryable error that ends a watch
// when the NATS connection is no longer connected.
var ErrConnectionLost = errors.New("natskv: connection to the server lost")

type watcher struct {
	out    chan coordination.WatchEvent
	cancel context.CancelFunc
	done   chan struct{}
	err    error
}

var _ coordination.Watcher = (*watcher)(nil)

// Watch streams the live keys under prefix, SnapshotDone, then live events.
func (s *Store) Watch(ctx context.Context, ks coordination.Keyspace, prefix string) (coordination.Watcher, error) {
	kv, err := s.kv("watch", ks, prefix, true)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	kw, err := kv.Watch(ctx, filter(prefix))
	if err != nil {
		cancel()
		return nil, classify("watch", ks, prefix, err)
	}
	w := &watcher{out: make(chan coordination.WatchEvent), cancel: cancel, done: make(chan struct{})}
	go w.run(ctx, s, kw, ks, prefix)
	return w, nil
}

func (w *watcher) run(ctx context.Context, s *Store, kw jetstream.KeyWatcher, ks coordination.Keyspace, prefix string) {
	defer close(w.done)
	defer close(w.out)
	defer kw.Stop()
	poll := time.NewTicker(s.cfg.connPoll)
	defer poll.Stop()
	live := false
	send := func(ev coordination.WatchEvent) bool {
		select {
		case w.out <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-poll.C:
			if !s.nc.IsConnected() {
				w.err = coordination.Retryable("watch", ks, prefix, ErrConnectionLost)
				return
			}
		case e, ok := <-kw.Updates():
			if !ok {
				if ctx.Err() == nil {
					w.err = coordination.Retryable("watch", ks, prefix, errors.New("natskv: watcher updates channel closed"))
				}
				return
			}
			if e == nil {
				if !live {
					live = true
					if !send(coordination.WatchEvent{Kind: coordination.EventSnapshotDone}) {
						return
					}
				}
				continue
			}
			ev := coordination.WatchEvent{Entry: coordination.Entry{Key: e.Key(), Revision: coordination.Revision(e.Revision())}}
			switch e.Operation() {
			case jetstream.KeyValuePut:
				ev.Kind = coordination.EventPut
				ev.Value = e.Value()
			case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
				if !live {
					continue // the snapshot holds live keys only
				}
				ev.Kind = coordination.EventDelete
			default:
				continue
			}
			if !send(ev) {
				return
			}
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
