// Package interrupt is how tflo's commands (starter, the worker, the
// simulator) stop on SIGINT or SIGTERM: the first signal cancels a
// context, so the command stops cleanly (a worker drains and takes its
// final checkpoints); a second one, while it stops, ends it at once, as
// most CLIs do. signal.NotifyContext keeps catching the signal after the
// first, so a second Ctrl-C was ignored and a stop stuck on an
// unreachable server needed SIGKILL.
package interrupt

import (
	"context"
	"os"
	"sync"
)

// Context returns a context, derived from parent, that the first signal
// on sigs cancels; a second signal while the command stops calls again
// (which says so and exits). stop cancels the context and ends the watch:
// once it returns, no signal calls again. The caller owns sigs
// (signal.Notify, signal.Stop).
func Context(parent context.Context, sigs <-chan os.Signal, again func()) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-sigs:
			cancel()
		case <-quit:
			return
		}
		select {
		case <-sigs:
			again()
		case <-quit:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			cancel()
			close(quit)
			<-done
		})
	}
}
