package faults

import "errors"

// ErrInjected is wrapped by every failure a Store injects on purpose.
var ErrInjected = errors.New("injected fault")

// ErrCrashed is wrapped by the errors of writes refused after a Store's
// crash point: the simulated process is dead and nothing was written.
var ErrCrashed = errors.New("injected crash: store write after the crash point")
