package influx

import (
	"errors"
	"fmt"

	"github.com/tflo-io/tflo/streaming"
)

// ErrUnauthorized is wrapped by a *WriteError for HTTP 401 and 403: wrong
// or missing credentials. The sink does not retry it; it fails, and every
// later Write and Flush returns the same error. It wraps
// streaming.ErrSinkFailed, as ErrNoBucket and ErrTLS do.
var ErrUnauthorized error = &failedForGood{"influx: credentials refused"}

// ErrNoBucket is wrapped by a *WriteError for HTTP 404 (and InfluxDB
// 1.8's HTTP 500 "retention policy not found"): the bucket (on 1.8+, the
// database or retention policy) does not exist. Like
// ErrUnauthorized it fails the sink without retries.
var ErrNoBucket error = &failedForGood{"influx: bucket not found"}

// ErrTLS is wrapped by a *WriteError when the server's certificate does
// not verify (unknown authority, wrong host name, expired): a
// configuration error, so the sink fails without retries. Set the CA with
// WithTLS.
var ErrTLS error = &failedForGood{"influx: server certificate not trusted"}

// ErrRefused is wrapped by a *WriteError for an HTTP 4xx status that
// names no bad data, credentials or bucket (405, 411, 415, 426, 431, ...:
// the URL reaches something that is not InfluxDB's write endpoint, or a
// proxy in front refuses the request): resending the same request gets
// the same answer, so, like ErrUnauthorized, it fails the sink without
// retries. 408 and 429 are retried.
var ErrRefused error = &failedForGood{"influx: request refused"}

// failedForGood is an error of the sink's configuration, which fails the
// sink for good (streaming.ErrSinkFailed).
type failedForGood struct{ msg string }

func (e *failedForGood) Error() string { return e.msg }
func (e *failedForGood) Unwrap() error { return streaming.ErrSinkFailed }

// ErrRejected is wrapped by a *WriteError for a batch the server refused
// as bad data (HTTP 400, 422: a malformed point, a field type conflict,
// a partial write; 413 for a single line too large). The batch is not retried; the sink reports
// it to the OnReject hook, counts it, and carries on. Of a partial write
// (WriteError.Dropped > 0) only the dropped points count as rejected: the
// server wrote the others.
var ErrRejected = errors.New("influx: batch rejected")

// ErrPointRefused is wrapped by a *PointError: the point cannot be
// written as line protocol that InfluxDB accepts and reads back
// unchanged (a non-finite float, a sensor id with a newline or a trailing
// backslash, a timestamp out of range, ...). Sink.Write refuses such a
// point on its own — counted in Stats.Refused and reported to the
// WithOnRefuse hook — and buffers the rest of the call.
var ErrPointRefused = errors.New("influx: point refused")

// PointError names a point AppendLine cannot encode and why. Long
// measurement names and sensor ids are shortened in the message.
type PointError struct {
	Measurement string
	Sensor      string
	TS          int64
	Reason      string
}

func (e *PointError) Error() string {
	return fmt.Sprintf("influx point %s sensor %s ts %d: %s", streaming.QuoteKey(e.Measurement), streaming.QuoteKey(e.Sensor), e.TS, e.Reason)
}

func (e *PointError) Unwrap() error { return ErrPointRefused }

// ErrClosed is returned by Write and Flush after Close.
var ErrClosed = errors.New("influx sink closed")

// WriteError describes a failed write request. It names the endpoint and
// bucket, never the token or password.
type WriteError struct {
	Endpoint   string // the server's base URL, without any user info
	Bucket     string
	StatusCode int    // 0 for a transport error (connection refused, timeout)
	Message    string // the server's message, or the transport error
	Points     int    // points in the batch
	Attempts   int    // requests made for this batch so far
	// Dropped is, for a partial write (the server's "partial write: ...
	// dropped=N"), how many of the batch's Points the server refused: it
	// wrote the others. The server does not say which it refused. 0 when
	// the whole batch failed.
	Dropped int
	Err     error // ErrUnauthorized, ErrNoBucket, ErrTLS, ErrRejected, or nil for retryable errors
}

func (e *WriteError) Error() string {
	status := "transport error"
	if e.StatusCode != 0 {
		status = fmt.Sprintf("HTTP %d", e.StatusCode)
	}
	s := fmt.Sprintf("influx write to %s bucket %q (%d points, attempt %d): %s: %s", e.Endpoint, e.Bucket, e.Points, e.Attempts, status, e.Message)
	if e.Dropped > 0 {
		s += fmt.Sprintf(" (%d of the %d points dropped, the others written)", e.Dropped, e.Points)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *WriteError) Unwrap() error { return e.Err }
