package mqtt

import "sync/atomic"

// Counter names one of the source's counters.
type Counter int

// The source's counters.
const (
	CounterReceived         Counter = iota // PUBLISH packets handed to the source
	CounterProcessed                       // messages the handler accepted
	CounterDuplicates                      // QoS 2 redeliveries dropped by the dedup window
	CounterRetainedSkipped                 // retained messages already seen, dropped
	CounterDeadLettered                    // malformed payloads published to the dead-letter topic
	CounterDeadLetterFailed                // dead-letter publishes that failed (message left unacked)
	CounterConnects                        // successful (re)connections
	CounterConnectErrors                   // failed connection attempts
	CounterSubscribes                      // successful SUBSCRIBEs (one per connection)
	numCounters
)

var counterNames = [numCounters]string{
	"received", "processed", "duplicates", "retained_skipped", "dead_lettered",
	"dead_letter_failed", "connects", "connect_errors", "subscribes",
}

// String returns the counter's metric-friendly name ("dead_lettered").
func (c Counter) String() string {
	if c >= 0 && c < numCounters {
		return counterNames[c]
	}
	return "unknown"
}

// CounterHook receives every counter increment. It is called from the
// source's goroutines and must not block.
type CounterHook func(c Counter, delta uint64)

// Stats is a point-in-time copy of a source's counters and cursor sizes.
type Stats struct {
	Received, Processed, Duplicates, RetainedSkipped uint64
	DeadLettered, DeadLetterFailed                   uint64
	Connects, ConnectErrors, Subscribes              uint64
	WindowLen, WindowCap, RetainedLen, RetainedCap   int
	// NewestTS is the event time of the newest reading the handler
	// accepted, in the decoder's time unit (Unix ms for DecodeReading; a
	// pipeline's time_unit with DecodeReadingIn), 0 before the first: readings outside the source's
	// Limits never reach it, so it is safe for a lag gauge.
	NewestTS int64
	// PendingAcks are the handled messages awaiting a saved checkpoint's
	// acknowledgement (WithAckOnCheckpoint; 0 otherwise). The broker
	// stops sending when they fill its in-flight window for this client.
	PendingAcks int
	// Connected reports that the connection to the broker is up (false
	// before the first one, while it is down and reconnecting, and once
	// Run returned); Subscribed that the source has subscribed on this
	// connection (false from a reconnect until its SUBACK).
	Connected, Subscribed bool
}

type counters struct {
	v    [numCounters]atomic.Uint64
	hook CounterHook
}

func (c *counters) inc(k Counter) {
	c.v[k].Add(1)
	if c.hook != nil {
		c.hook(k, 1)
	}
}

func (c *counters) get(k Counter) uint64 { return c.v[k].Load() }
