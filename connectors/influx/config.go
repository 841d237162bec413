package influx

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"time"
)

// Option configures a Sink.
type Option func(*config)

type config struct {
	token          string
	org            string
	batchSize      int
	flushInterval  time.Duration
	maxPending     int
	retryMin       time.Duration
	retryMax       time.Duration
	breakerFails   int
	breakerCool    time.Duration
	requestTimeout time.Duration
	tls            *tls.Config
	logger         *slog.Logger
	onReject       func(err *WriteError, lines []byte)
	onRefuse       func(err error)
	gzip           bool
}

func defaultConfig() config {
	return config{
		batchSize:      5000,
		flushInterval:  time.Second,
		maxPending:     4,
		retryMin:       100 * time.Millisecond,
		retryMax:       5 * time.Second,
		breakerFails:   5,
		breakerCool:    5 * time.Second,
		requestTimeout: 10 * time.Second,
		logger:         slog.New(slog.DiscardHandler),
	}
}

func (c *config) validate() error {
	var errs []error
	if c.batchSize < 1 {
		errs = append(errs, fmt.Errorf("batch size must be at least 1 point, got %d", c.batchSize))
	}
	if c.flushInterval <= 0 {
		errs = append(errs, fmt.Errorf("flush interval must be positive, got %v", c.flushInterval))
	}
	if c.maxPending < 1 {
		errs = append(errs, fmt.Errorf("max pending batches must be at least 1, got %d", c.maxPending))
	}
	if c.retryMin <= 0 || c.retryMax < c.retryMin {
		errs = append(errs, fmt.Errorf("retry backoff must satisfy 0 < min <= max, got min %v max %v", c.retryMin, c.retryMax))
	}
	if c.breakerFails < 1 || c.breakerCool <= 0 {
		errs = append(errs, fmt.Errorf("breaker needs a threshold of at least 1 and a positive cool-down, got %d and %v", c.breakerFails, c.breakerCool))
	}
	if c.requestTimeout <= 0 {
		errs = append(errs, fmt.Errorf("request timeout must be positive, got %v", c.requestTimeout))
	}
	return errors.Join(errs...)
}

// WithToken sets the credential sent as "Authorization: Token <token>".
// InfluxDB 2.x: an API token. InfluxDB 1.8+: "user:password" (see
// WithUserPassword), or nothing when auth is disabled. Default: none.
// The token never appears in logs or errors.
func WithToken(token string) Option { return func(c *config) { c.token = token } }

// WithUserPassword sets InfluxDB 1.8+ credentials; the v2 write API of 1.x
// takes them as the token "user:password".
func WithUserPassword(user, password string) Option {
	return func(c *config) { c.token = user + ":" + password }
}

// WithTokenFromEnv reads the token from the environment variable name
// (for 1.8+ its value is "user:password"). An unset variable leaves the
// token empty.
func WithTokenFromEnv(name string) Option {
	return func(c *config) { c.token = os.Getenv(name) }
}

// WithOrg sets the organization. InfluxDB 2.x: required (name or ID).
// InfluxDB 1.8+: leave it empty (the default).
func WithOrg(org string) Option { return func(c *config) { c.org = org } }

// WithBatchSize sets how many points go in one write request. Default 5000.
func WithBatchSize(n int) Option { return func(c *config) { c.batchSize = n } }

// WithFlushInterval sets the longest a point waits in a partial batch
// before it is sent. Default 1s.
func WithFlushInterval(d time.Duration) Option { return func(c *config) { c.flushInterval = d } }

// WithMaxPendingBatches bounds the sealed batches waiting to be sent
// (including the one in flight). With the batch being filled, the sink
// buffers at most (n+1) × batch size points; beyond that Write blocks —
// the back-pressure that slows the pipeline while the server is down.
// A Flush seals the batch being filled even into a full queue (a
// checkpoint must not wait behind the writers), so each Flush under way
// may add one batch to the bound. Default 4.
func WithMaxPendingBatches(n int) Option { return func(c *config) { c.maxPending = n } }

// WithRetryBackoff sets the exponential backoff between attempts at a
// batch that failed with a retryable error (5xx, 429, a transport error):
// from min, doubling, capped at max, with jitter; a server's Retry-After
// is honoured. Default 100ms to 5s.
func WithRetryBackoff(min, max time.Duration) Option {
	return func(c *config) { c.retryMin, c.retryMax = min, max }
}

// WithBreaker sets the circuit breaker: it opens after threshold
// consecutive failed requests, and then the sink sends nothing for
// coolDown before one probe request. Default 5 failures, 5s.
func WithBreaker(threshold int, coolDown time.Duration) Option {
	return func(c *config) { c.breakerFails, c.breakerCool = threshold, coolDown }
}

// WithRequestTimeout bounds one write request. Default 10s.
func WithRequestTimeout(d time.Duration) Option { return func(c *config) { c.requestTimeout = d } }

// WithTLS sets the TLS configuration for https endpoints (custom CA in
// RootCAs, client certificates). Default: the system roots.
func WithTLS(cfg *tls.Config) Option { return func(c *config) { c.tls = cfg } }

// WithGzip compresses request bodies. Default off.
func WithGzip(on bool) Option { return func(c *config) { c.gzip = on } }

// WithLogger sets the logger for retries, breaker changes and rejected
// batches. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithOnReject sets the dead-letter hook called with a batch the server
// rejected as bad data (ErrRejected) and its line protocol; lines is only
// valid during the call. Of a partial write (err.Dropped > 0) the server
// wrote all lines but err.Dropped of them, and does not say which: lines
// is the whole batch. Default: none (the batch is logged and counted).
func WithOnReject(f func(err *WriteError, lines []byte)) Option {
	return func(c *config) { c.onReject = f }
}

// WithOnRefuse sets the dead-letter hook called with the *PointError of
// each point Write refuses (ErrPointRefused: it cannot be written as line
// protocol InfluxDB accepts unchanged). It runs on the writer's
// goroutine. Default: none (the point is logged and counted in
// Stats.Refused).
func WithOnRefuse(f func(err error)) Option {
	return func(c *config) { c.onRefuse = f }
}

// redactURL returns u without user info, for messages.
func redactURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", errors.New("influx sink: endpoint is not a valid URL") // the URL may carry a password: not echoed
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return "", fmt.Errorf("influx sink: endpoint scheme %q, want http or https", u.Scheme)
	}
	if u.Host == "" {
		return "", fmt.Errorf("influx sink: endpoint %q has no host", u.Redacted())
	}
	u.User = nil
	return u.String(), nil
}
