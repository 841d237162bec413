package worker

import (
	"context"
	"errors"
	"sync/atomic"
)

// Readiness is what a worker's /readyz asks: a check the running main
// sets once it has something to check (a pipeline worker's Ready). Until
// then the worker is not ready. Safe for concurrent use.
type Readiness struct {
	check atomic.Pointer[func(context.Context) error]
}

// Set makes f the readiness check.
func (r *Readiness) Set(f func(context.Context) error) { r.check.Store(&f) }

// Check runs the check: nil when ready, else what is missing.
func (r *Readiness) Check(ctx context.Context) error {
	if r == nil {
		return nil
	}
	f := r.check.Load()
	if f == nil {
		return errors.New("starting")
	}
	return (*f)(ctx)
}
