package natskv

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go"
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
	// Registered before the KV watch exists: a drop the client recovers
	// from between two polls of the connection would otherwise go
	// unnoticed, and what was published meanwhile may never arrive.
	drops := s.nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
	ctx, cancel := context.WithCancel(ctx)
	kw, err := kv.Watch(ctx, filter(prefix))
	if err != nil {
		s.nc.RemoveStatusListener(drops)
		cancel()
		return nil, classify("watch", ks, prefix, err)
	}
	rp, err := s.replay(ctx, ks, prefix)
	if err != nil {
		kw.Stop()
		s.nc.RemoveStatusListener(drops)
		cancel()
		return nil, classify("watch", ks, prefix, err)
	}
	w := &watcher{out: make(chan coordination.WatchEvent), cancel: cancel, done: make(chan struct{})}
	go w.run(ctx, s, kw, rp, drops, ks, prefix)
	return w, nil
}

func (w *watcher) run(ctx context.Context, s *Store, kw jetstream.KeyWatcher, rp *replay, drops chan nats.Status, ks coordination.Keyspace, prefix string) {
	defer close(w.done)
	defer close(w.out)
	defer func() {
		_ = kw.Stop()
		// nats.go hands updates over from the subscription's delivery
		// goroutine into a channel of 256, blocking while it is full:
		// left unread, that goroutine would stay blocked for good. It
		// closes the channel once the subscription has ended.
		for range kw.Updates() {
		}
	}()
	defer s.nc.RemoveStatusListener(drops)
	poll := time.NewTicker(s.cfg.connPoll)
	defer poll.Stop()
	live := false
	// sent holds the keys put during the snapshot. A key can be deleted
	// after the watch sent it and before the snapshot is complete; that
	// delete must be forwarded or the consumer keeps the key forever. A
	// delete of a key not sent yet is dropped: the snapshot holds live keys
	// only.
	sent := map[string]struct{}{}
	send := func(ev coordination.WatchEvent) bool {
		select {
		case w.out <- ev:
			return true
		case <-ctx.Done():
			return false
		}
	}
	snapshotDone := func() bool {
		live, sent = true, nil
		return send(coordination.WatchEvent{Kind: coordination.EventSnapshotDone})
	}
	if rp.empty() && !snapshotDone() {
		return
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-drops:
			if ctx.Err() == nil {
				w.err = coordination.Retryable("watch", ks, prefix, ErrConnectionLost)
			}
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
				continue // nats.go's count-based marker; see replay
			}
			ev := coordination.WatchEvent{Entry: coordination.Entry{Key: e.Key(), Revision: coordination.Revision(e.Revision())}}
			forward := true
			switch e.Operation() {
			case jetstream.KeyValuePut:
				ev.Kind = coordination.EventPut
				ev.Value = e.Value()
				s.values.add(ks, ev.Revision)
				if !live {
					sent[e.Key()] = struct{}{}
				}
			case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
				ev.Kind = coordination.EventDelete
				if !live {
					_, forward = sent[e.Key()]
					delete(sent, e.Key())
				}
			default:
				forward = false
			}
			if forward && !send(ev) {
				return
			}
			if live {
				continue
			}
			done, err := rp.after(ctx, e)
			if err != nil {
				if ctx.Err() == nil {
					w.err = classify("watch", ks, prefix, err)
				}
				return
			}
			if done && !snapshotDone() {
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
