package central

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/natskv"
	"github.com/tflo-io/tflo/coordination/split"
)

// WithCoordinationStore registers the worker in s (instead of the NATS
// server of Config.Coordination): an in-process store for an embedded
// deployment or a test. The caller closes s after Run returns.
func WithCoordinationStore(s coordination.Store) Option {
	return func(o *options) { o.coord = s }
}

// errNoSplits: a central worker serves Kafka partitions (the group
// protocol owns them), so a split offered to it was added to its job by
// mistake; refusing it releases it as a failed tenancy.
var errNoSplits = errors.New("central workers serve Kafka partitions, not splits")

// membership is the worker's place in the coordination store: a
// split.Worker that renews its presence lease on its own goroutine.
type membership struct {
	sw     *split.Worker
	cancel context.CancelFunc
	close  func() // closes a connection opened here
}

// join opens the coordination store (when configured) and registers the
// worker, waiting until its presence is written. It returns nil when the
// worker has no coordination store. A second live process with the same
// worker id makes it fail (split.ErrDuplicateWorker); the presence of a
// dead predecessor is taken over once it expires.
func (w *Worker) join(ctx context.Context) (*membership, error) {
	store, closeFn := w.o.coord, func() {}
	cc := w.cfg.Coordination
	if store == nil && cc.NATSURL == "" {
		return nil, nil
	}
	where := "the given coordination store"
	if store == nil {
		where = fmt.Sprintf("coordination store %s (job %q)", cc.NATSURL, cc.Job)
		nc, err := nats.Connect(cc.NATSURL, nats.Name("tflo-central-"+w.cfg.WorkerID), nats.MaxReconnects(-1),
			nats.ReconnectWait(time.Second), nats.Timeout(5*time.Second))
		if err != nil {
			return nil, fmt.Errorf("central worker %q: connect %s: %w", w.cfg.WorkerID, where, err)
		}
		js, err := jetstream.New(nc)
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("central worker %q: %s: %w", w.cfg.WorkerID, where, err)
		}
		octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
		kv, err := natskv.Open(octx, js, cc.Job, natskv.WithLeaseTTL(cc.LeaseTTL.D()))
		ocancel()
		if err != nil {
			nc.Close()
			return nil, fmt.Errorf("central worker %q: open %s: %w", w.cfg.WorkerID, where, err)
		}
		store, closeFn = kv, nc.Close
	}
	sw, err := split.NewWorker(store, split.WorkerID(w.cfg.WorkerID),
		split.WithHandler(func(_ context.Context, t *split.Tenancy) error {
			return fmt.Errorf("central worker %q refuses split %q: %w", w.cfg.WorkerID, t.Spec().ID, errNoSplits)
		}),
		split.WithMaxAttempts(1),
		split.WithLogger(w.log.With("component", "coordination")))
	if err != nil {
		closeFn()
		return nil, fmt.Errorf("central worker %q: %w", w.cfg.WorkerID, err)
	}
	// The membership outlives Run's context: it is stopped after the
	// Temporal workers, so the presence lease is the last thing to go.
	mctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() { _ = sw.Run(mctx) }()
	m := &membership{sw: sw, cancel: cancel, close: closeFn}
	w.log.Info("registering in the coordination store", "store", where, "lease_ttl", store.LeaseTTL())
	select {
	case <-sw.Registered():
		w.log.Info("registered in the coordination store", "instance", sw.Instance())
		return m, nil
	case <-sw.Stopped():
		m.stop()
		return nil, fmt.Errorf("central worker %q: register in %s: %w", w.cfg.WorkerID, where, sw.Err())
	case <-ctx.Done():
		m.stop()
		return nil, fmt.Errorf("central worker %q: register in %s: %w", w.cfg.WorkerID, where, ctx.Err())
	}
}

// stop withdraws the presence (split.Worker's graceful shutdown) and
// closes what join opened.
func (m *membership) stop() {
	if m == nil {
		return
	}
	m.cancel()
	<-m.sw.Stopped()
	m.close()
}
