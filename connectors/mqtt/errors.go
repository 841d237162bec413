package mqtt

import (
	"errors"
	"fmt"
)

// ErrBadCredentials is returned by Source.Run when the
// broker refuses the CONNECT with "bad user name or password" (0x86) or
// "not authorized" (0x87). The connection manager stops at the first such
// CONNACK instead of retrying: a wrong password is a configuration error,
// and hammering the broker with it only locks the account.
var ErrBadCredentials = errors.New("mqtt: broker refused the credentials")

// ErrClosed is returned by calls on a Source whose Run has returned.
var ErrClosed = errors.New("mqtt: source closed")

// ErrMalformed is wrapped by DecodeReading errors: the payload is not a
// sensor reading. Malformed payloads go to the dead-letter topic.
var ErrMalformed = errors.New("malformed reading")

// ErrTopicMismatch is wrapped by the dead-letter reason of a reading whose
// sensor id is not the last level of its topic (WithRequireTopicMatch).
var ErrTopicMismatch = errors.New("sensor does not match topic")

// ErrRefused, wrapped by a Handler's error, refuses the one message: the
// source dead-letters it with the error as the reason and carries on,
// instead of stopping Run (a pipeline refuses a new key over its key cap
// this way).
var ErrRefused = errors.New("refused by the handler")

// ErrConnectionLost: a dead letter's publish was lost with the connection
// (a DeadLetterSink's Write wraps it). The source leaves the message
// unacknowledged, so the broker redelivers it and it is dead-lettered
// then, and carries on.
var ErrConnectionLost = errors.New("mqtt: connection lost")

// ConnectError describes a CONNACK refusal. It names the broker and the
// user but never carries the password.
type ConnectError struct {
	Server     string // broker URL, without user info
	Username   string // may be empty
	ReasonCode byte   // CONNACK reason code
	Reason     string // broker's reason string, when it sent one
	Err        error  // ErrBadCredentials, or the underlying error
}

func (e *ConnectError) Error() string {
	user := "anonymous"
	if e.Username != "" {
		user = fmt.Sprintf("user %q", e.Username)
	}
	msg := fmt.Sprintf("mqtt connect to %s as %s: refused with reason code 0x%02x", e.Server, user, e.ReasonCode)
	if e.Reason != "" {
		msg += " (" + e.Reason + ")"
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *ConnectError) Unwrap() error { return e.Err }

// HandlerError wraps an error returned by the Handler; Run returns it and
// the message it names is left unacknowledged, so the broker redelivers
// it to the persistent session.
type HandlerError struct {
	Topic    string
	PacketID uint16
	Err      error
}

func (e *HandlerError) Error() string {
	return fmt.Sprintf("mqtt handler: topic %q packet %d: %v", e.Topic, e.PacketID, e.Err)
}

func (e *HandlerError) Unwrap() error { return e.Err }
