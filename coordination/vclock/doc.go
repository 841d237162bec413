// Package vclock is a virtual coordination.Clock for tests: time stands still
// until the test calls Advance, which fires every timer that falls due, in
// deadline order, with Now set to each timer's deadline as it fires.
//
// Concurrency: every method is safe for concurrent use. AfterFunc callbacks
// run on their own goroutine, as with time.AfterFunc; channel timers send
// without blocking on a one-slot channel, and Stop and Reset drop a fire
// time not yet received, as with time.NewTimer since Go 1.23.
package vclock
