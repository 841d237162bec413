// Package logtest checks, in tests, a log line that can repeat once per
// record: how often it was written, and that internal/lograte's sample
// held (a stream of bad records must not flood the log).
package logtest

import (
	"bytes"
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/lograte"
)

// Buffer is a bytes.Buffer a running component writes to (its log, a
// main's stderr) while the test reads it. Safe for concurrent use.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

// String returns what was written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Counter is a slog.Handler counting the lines whose message is its
// message, and the "suppressed" counts they carry. Safe for concurrent
// use.
type Counter struct {
	msg               string
	lines, suppressed atomic.Int64
}

// NewCounter counts the lines whose message is msg.
func NewCounter(msg string) *Counter { return &Counter{msg: msg} }

// Logger returns a logger writing to c.
func (c *Counter) Logger() *slog.Logger { return slog.New(c) }

// Lines returns how many lines were counted.
func (c *Counter) Lines() int64 { return c.lines.Load() }

// Enabled implements slog.Handler.
func (c *Counter) Enabled(context.Context, slog.Level) bool { return true }

// WithAttrs implements slog.Handler.
func (c *Counter) WithAttrs([]slog.Attr) slog.Handler { return c }

// WithGroup implements slog.Handler.
func (c *Counter) WithGroup(string) slog.Handler { return c }

// Handle implements slog.Handler.
func (c *Counter) Handle(_ context.Context, r slog.Record) error {
	if r.Message == c.msg {
		c.lines.Add(1)
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "suppressed" {
				c.suppressed.Add(a.Value.Int64())
			}
			return true
		})
	}
	return nil
}

// RequireSampled asserts that n records, each of which would have written
// the line, over elapsed, wrote it at least once and at most lograte's
// default burst per interval, and that no line left out was reported
// twice (lines plus the suppressed counts never exceed n).
func (c *Counter) RequireSampled(t testing.TB, n int, elapsed time.Duration) {
	t.Helper()
	lines := c.lines.Load()
	intervals := int64(elapsed/lograte.DefaultInterval) + 1
	require.Positive(t, lines, "the first %q lines are logged", c.msg)
	require.LessOrEqual(t, lines, lograte.DefaultBurst*intervals,
		"%d records over %v: at most %d %q lines per %v", n, elapsed, lograte.DefaultBurst, c.msg, lograte.DefaultInterval)
	require.LessOrEqual(t, lines+c.suppressed.Load(), int64(n), "a line left out is reported once")
}
