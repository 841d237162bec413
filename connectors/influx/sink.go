package influx

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	influxdb2 "github.com/influxdata/influxdb-client-go/v2"
	"github.com/influxdata/influxdb-client-go/v2/api"
	ihttp "github.com/influxdata/influxdb-client-go/v2/api/http"

	"github.com/tflo-io/tflo/internal/lograte"
	"github.com/tflo-io/tflo/streaming"
)

// Sink writes points to InfluxDB through the v2 write API in batches.
//
// Write encodes points into the batch being filled; a batch is sealed when
// it reaches the batch size, when the flush interval passes, or on Flush,
// and one sender goroutine (owned by the Sink, started by NewSink, ended
// by Close) sends sealed batches in order with the client's blocking write
// API — one request per batch, so every error is observed here. Retryable
// failures (5xx, 408, 429, transport errors) are retried with backoff, behind a
// circuit breaker; the batch stays queued meanwhile, so nothing is lost.
// Bad data (400, 422) goes to the OnReject hook; a request too large
// (413) is split in halves and resent, so only a line too large by itself
// goes there. Wrong credentials
// (401, 403), a missing bucket (404; 1.8: 500 "retention policy not
// found"), another 4xx but 408 (ErrRefused) or a server certificate that
// does not verify fail the sink at once, without retries.
//
// Memory is bounded: at most MaxPendingBatches sealed batches plus the
// one being filled. When they are all full, Write blocks until the sender
// makes room or ctx ends — back-pressure to the pipeline while the server
// is slow or down.
//
// All methods are safe for concurrent use.
type Sink struct {
	cfg      config
	endpoint string // redacted
	bucket   string
	client   influxdb2.Client
	api      api.WriteAPIBlocking
	breaker  *streaming.Breaker
	// refuseLog samples the refused points' lines.
	refuseLog *lograte.Limiter

	mu      sync.Mutex
	cur     *batch
	queue   []*batch // sealed, oldest first; queue[0] may be in flight
	nextSeq uint64   // seq of the next sealed batch
	acked   uint64   // every batch with seq < acked is done (sent or rejected)
	ackCh   chan struct{}
	roomCh  chan struct{} // closed and replaced when the queue shrinks
	readyCh chan struct{} // buffered(1): a batch was sealed
	failed  error         // sticky fatal error
	closing bool          // Close began: Write refuses new points (ErrClosed)
	closed  bool
	stats   Stats
	// lastErr is the last retryable failure of the batch being sent (nil
	// once a request succeeds): a Flush or Write that gives up waiting
	// says what the server answered, not only that ctx ended.
	lastErr *WriteError
	// sealedBytes is the size of the last batch sealed: a new batch's
	// buffer starts at it, instead of doubling its way up from nothing
	// (3% of the central worker's CPU in BenchmarkCentralArchive went to
	// growing and copying batch buffers).
	sealedBytes int

	stop    chan struct{} // closed by Close to end the sender
	stopped chan struct{} // closed when the sender has returned
	cancel  context.CancelFunc
}

// lineBufs are Write's buffers for the lines of one call and where each
// ends.
var lineBufs = sync.Pool{New: func() any { return new(lineBuf) }}

type lineBuf struct {
	buf  []byte
	ends []int
}

type batch struct {
	seq    uint64
	lines  strings.Builder
	points int
	since  time.Time // when the first point was added
}

// Stats are the sink's counters.
type Stats struct {
	Points        int64  // points acknowledged by the server
	Batches       int64  // batches acknowledged
	Requests      int64  // write requests made
	Retries       int64  // requests that failed with a retryable error
	Rejected      int64  // points in batches rejected as bad data (of a partial write, only those the server dropped)
	Refused       int64  // points Write refused before sending (ErrPointRefused)
	Buffered      int    // points waiting (being filled or queued)
	Breaker       string // breaker state: closed, open, half-open
	BreakerOpened int64  // times the breaker opened
}

var errStopped = errors.New("influx sink stopped")

// NewSink returns a running sink writing to bucket at endpoint (the
// server's base URL, http or https).
//
// InfluxDB 2.x: bucket is the bucket name, WithOrg the organization and
// WithToken an API token. InfluxDB 1.8+ (its /api/v2/write compatibility
// endpoint): bucket is "database/retention-policy" ("db/autogen", or "db"
// for the default policy), org stays empty, and the token is
// "user:password" (WithUserPassword) or empty when auth is off.
func NewSink(endpoint, bucket string, opts ...Option) (*Sink, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("influx sink: %w", err)
	}
	red, err := redactURL(endpoint)
	if err != nil {
		return nil, err
	}
	if bucket == "" {
		return nil, fmt.Errorf("influx sink %s: empty bucket (InfluxDB 1.8+: \"database/retention-policy\")", red)
	}
	copts := influxdb2.DefaultOptions().
		SetApplicationName("tflo").
		SetLogLevel(0).
		// Whole seconds only: a backstop, rounded up. sendLines bounds
		// each request by the exact WithRequestTimeout.
		SetHTTPRequestTimeout(uint((cfg.requestTimeout + time.Second - 1) / time.Second)).
		SetUseGZip(cfg.gzip)
	if cfg.tls != nil {
		copts.SetTLSConfig(cfg.tls)
	}
	br, err := streaming.NewBreaker(cfg.breakerFails, cfg.breakerCool, 0, nil)
	if err != nil {
		return nil, fmt.Errorf("influx sink: %w", err)
	}
	client := influxdb2.NewClientWithOptions(endpoint, cfg.token, copts)
	s := &Sink{
		cfg:       cfg,
		endpoint:  red,
		bucket:    bucket,
		client:    client,
		api:       client.WriteAPIBlocking(cfg.org, bucket),
		breaker:   br,
		refuseLog: lograte.New(),
		ackCh:     make(chan struct{}),
		roomCh:    make(chan struct{}),
		readyCh:   make(chan struct{}, 1),
		stop:      make(chan struct{}),
		stopped:   make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	go s.run(ctx)
	return s, nil
}

// Write adds points to the sink. It returns once they are buffered (not
// once they are written: use Flush for that), blocking while the buffer
// is full. Points are encoded before Write returns; p is not retained.
//
// A point that cannot be encoded (a *PointError: a non-finite value, a
// sensor id InfluxDB would refuse or read back differently, ...) is
// refused on its own: it is counted in Stats.Refused, logged (sampled) and passed
// to the WithOnRefuse hook, and the other points of the call are
// buffered — one bad point never fails the call, the batch or a later
// Flush. When ctx ends while Write waits for room, the points before the
// wait stay buffered and the error says how many. After a fatal error
// (wrong credentials) Write returns it.
func (s *Sink) Write(ctx context.Context, points ...Point) error {
	// Encode outside the lock; one line per point.
	lb := lineBufs.Get().(*lineBuf)
	buf, ends := lb.buf[:0], lb.ends[:0]
	defer func() {
		lb.buf, lb.ends = buf[:0], ends[:0]
		lineBufs.Put(lb)
	}()
	for _, p := range points {
		var err error
		if buf, err = AppendLine(buf, p); err != nil {
			s.refuse(err)
			continue
		}
		ends = append(ends, len(buf))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	start := 0
	for i, end := range ends {
		if err := s.waitRoomLocked(ctx); err != nil {
			if i > 0 && ctx.Err() != nil {
				return fmt.Errorf("%w (%d of %d points of this call buffered)", err, i, len(ends))
			}
			return err
		}
		b := s.cur
		if b == nil {
			b = &batch{since: time.Now()}
			b.lines.Grow(s.sealedBytes)
			s.cur = b
		} else {
			b.lines.WriteByte('\n')
		}
		b.lines.Write(buf[start:end])
		b.points++
		s.stats.Buffered++
		start = end
		if b.points >= s.cfg.batchSize && len(s.queue) < s.cfg.maxPending {
			s.sealLocked()
		}
	}
	return nil
}

// refuse counts and reports a point AppendLine refused.
func (s *Sink) refuse(err error) {
	s.mu.Lock()
	s.stats.Refused++
	s.mu.Unlock()
	if ok, skipped := s.refuseLog.Allow(); ok { // an operator emitting NaN for every record would log a line each
		s.cfg.logger.Warn("influx point refused", lograte.With(skipped, "endpoint", s.endpoint, "bucket", s.bucket, "err", err)...)
	}
	if s.cfg.onRefuse != nil {
		s.cfg.onRefuse(err)
	}
}

// waitRoomLocked returns when the current batch can take a point: it is
// not full, or it is full and the queue has room to seal it. It drops the
// lock while waiting.
func (s *Sink) waitRoomLocked(ctx context.Context) error {
	for {
		if s.failed != nil {
			return s.failed
		}
		if s.closed || s.closing {
			return ErrClosed
		}
		if s.cur == nil || s.cur.points < s.cfg.batchSize {
			return nil
		}
		if len(s.queue) < s.cfg.maxPending {
			s.sealLocked()
			return nil
		}
		room := s.roomCh
		s.mu.Unlock()
		select {
		case <-room:
		case <-ctx.Done():
			s.mu.Lock()
			return fmt.Errorf("influx sink %s bucket %q: waiting for buffer room (%d batches queued, breaker %s): %w%s",
				s.endpoint, s.bucket, len(s.queue), s.breaker.State(), ctx.Err(), s.lastErrLocked())
		}
		s.mu.Lock()
	}
}

// sealLocked moves the current batch to the queue. The caller has made
// sure the queue has room (or is Flush, which may overfill it).
func (s *Sink) sealLocked() {
	if s.cur == nil {
		return
	}
	s.cur.seq = s.nextSeq
	s.nextSeq++
	s.sealedBytes = s.cur.lines.Len()
	s.queue = append(s.queue, s.cur)
	s.cur = nil
	select {
	case s.readyCh <- struct{}{}:
	default:
	}
}

// Flush seals the batch being filled and waits until every point written
// before the call is acknowledged by the server (or rejected as bad data
// and reported). Call it before committing the cursor of a checkpoint.
// It returns the sink's fatal error if there is one, or ctx's error.
//
// The batch is sealed even when the queue is full (the queue then holds
// a batch more than WithMaxPendingBatches until it drains): waiting for
// room, a Flush competed with the writers woken by the same room, and
// under a saturated hot path they won every time, so checkpoints stopped
// completing.
func (s *Sink) Flush(ctx context.Context) error {
	s.mu.Lock()
	if s.cur != nil && s.cur.points > 0 {
		s.sealLocked()
	}
	target := s.nextSeq
	for {
		if s.acked >= target {
			s.mu.Unlock()
			return nil
		}
		if s.failed != nil {
			err := s.failed
			s.mu.Unlock()
			return err
		}
		ack := s.ackCh
		s.mu.Unlock()
		select {
		case <-ack:
		case <-s.stopped:
			s.mu.Lock()
			if s.acked >= target {
				s.mu.Unlock()
				return nil
			}
			err := s.failed
			s.mu.Unlock()
			if err == nil {
				err = ErrClosed
			}
			return err
		case <-ctx.Done():
			s.mu.Lock()
			last := s.lastErrLocked()
			s.mu.Unlock()
			return fmt.Errorf("influx sink %s bucket %q: flush (breaker %s): %w%s", s.endpoint, s.bucket, s.breaker.State(), ctx.Err(), last)
		}
		s.mu.Lock()
	}
}

// Close drains the sink — sends what is buffered, bounded by ctx — then
// stops the sender and releases the client. When ctx ends first, the rest
// is dropped (a replay from the last checkpoint rewrites it). Close is
// idempotent; it returns the drain's error.
func (s *Sink) Close(ctx context.Context) error {
	// Refuse new points first: a writer woken by the drain (or arriving
	// during it) would buffer points the drain does not wait for, which
	// stopping the sender then dropped while Write and Close returned nil.
	s.mu.Lock()
	s.closing = true
	close(s.roomCh) // writers waiting for room see closing
	s.roomCh = make(chan struct{})
	s.mu.Unlock()
	err := s.Flush(ctx)
	if errors.Is(err, ErrClosed) {
		err = nil
	}
	s.mu.Lock()
	first := !s.closed
	s.closed = true
	s.mu.Unlock()
	if first {
		close(s.stop)
		s.cancel()
		<-s.stopped
		s.client.Close()
		s.mu.Lock()
		close(s.roomCh) // release writers still waiting: they see closed
		s.roomCh = make(chan struct{})
		s.mu.Unlock()
	}
	return err
}

// lastErrLocked is "; last attempt: <the last retryable failure>", or ""
// when the last request succeeded.
func (s *Sink) lastErrLocked() string {
	if s.lastErr == nil {
		return ""
	}
	return "; last attempt: " + s.lastErr.Error()
}

// Err returns the sink's fatal error, or nil.
func (s *Sink) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failed
}

// Ping asks the server's /ping endpoint whether it is up (InfluxDB 1.8
// and 2.x both serve it); an error names the endpoint.
func (s *Sink) Ping(ctx context.Context) error {
	ok, err := s.client.Ping(ctx)
	if err == nil && !ok {
		err = errors.New("not ready")
	}
	if err != nil {
		return fmt.Errorf("influx sink %s: ping: %w", s.endpoint, err)
	}
	return nil
}

// Stats returns a snapshot of the counters.
func (s *Sink) Stats() Stats {
	s.mu.Lock()
	st := s.stats
	s.mu.Unlock()
	st.Breaker = s.breaker.State().String()
	return st
}

// run is the sender loop.
func (s *Sink) run(ctx context.Context) {
	defer close(s.stopped)
	tick := time.NewTicker(max(s.cfg.flushInterval/4, time.Millisecond))
	defer tick.Stop()
	for {
		s.mu.Lock()
		if s.cur != nil && len(s.queue) < s.cfg.maxPending &&
			(s.cur.points >= s.cfg.batchSize || time.Since(s.cur.since) >= s.cfg.flushInterval) {
			s.sealLocked()
		}
		var b *batch
		if len(s.queue) > 0 {
			b = s.queue[0]
		}
		s.mu.Unlock()
		if b == nil {
			select {
			case <-s.readyCh:
			case <-tick.C:
			case <-s.stop:
				return
			}
			continue
		}
		if err := s.send(ctx, b); err != nil {
			if !errors.Is(err, errStopped) {
				s.fail(err)
			}
			return
		}
		s.mu.Lock()
		s.queue[0] = nil
		s.queue = s.queue[1:]
		s.acked = b.seq + 1
		s.stats.Buffered -= b.points
		close(s.ackCh)
		s.ackCh = make(chan struct{})
		close(s.roomCh)
		s.roomCh = make(chan struct{})
		s.mu.Unlock()
	}
}

func (s *Sink) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.failed = err
	close(s.ackCh)
	s.ackCh = make(chan struct{})
	close(s.roomCh)
	s.roomCh = make(chan struct{})
	s.cfg.logger.Error("influx sink failed", "endpoint", s.endpoint, "bucket", s.bucket, "err", err)
}

// send writes one batch, retrying until it is acknowledged or rejected
// (nil), credentials are refused (the fatal *WriteError), or the sink
// stops (errStopped).
func (s *Sink) send(ctx context.Context, b *batch) error {
	return s.sendLines(ctx, b.lines.String(), b.points)
}

// sendLines sends body (points lines of line protocol) as one request. A
// request the server finds too large (413) is split in halves, each sent
// on its own, down to a single line: only a line too large by itself is
// rejected, not the good points that travelled with it.
func (s *Sink) sendLines(ctx context.Context, body string, points int) error {
	backoff := s.cfg.retryMin
	for attempt := 1; ; attempt++ {
		// Wait for the breaker to let a request through.
		for {
			err := s.breaker.Allow()
			if err == nil {
				break
			}
			if !s.sleep(ctx, min(s.cfg.breakerCool/10+time.Millisecond, 100*time.Millisecond)) {
				return errStopped
			}
		}
		s.mu.Lock()
		s.stats.Requests++
		s.mu.Unlock()
		rctx, cancel := context.WithTimeout(ctx, s.cfg.requestTimeout)
		err := s.api.WriteRecord(rctx, body)
		cancel()
		if err == nil {
			s.breaker.Success()
			s.mu.Lock()
			s.lastErr = nil
			s.stats.Points += int64(points)
			s.stats.Batches++
			s.mu.Unlock()
			return nil
		}
		if ctx.Err() != nil {
			return errStopped
		}
		we, retryAfter := s.classify(err, points, attempt)
		switch {
		case errors.Is(we, ErrUnauthorized), errors.Is(we, ErrNoBucket), errors.Is(we, ErrTLS), errors.Is(we, ErrRefused):
			// The server is up but refuses the configuration: no breaker
			// failure, no retry.
			return we
		case errors.Is(we, ErrRejected) && we.StatusCode == http.StatusRequestEntityTooLarge && points > 1:
			s.breaker.Success()
			s.cfg.logger.Debug("influx request too large: splitting it", "points", points, "bytes", len(body))
			half := points / 2
			cut := 0
			for range half {
				cut += strings.IndexByte(body[cut:], '\n') + 1
			}
			if err := s.sendLines(ctx, body[:cut-1], half); err != nil {
				return err
			}
			return s.sendLines(ctx, body[cut:], points-half)
		case errors.Is(we, ErrRejected):
			s.breaker.Success()
			s.mu.Lock()
			if we.Dropped > 0 {
				// A partial write: the server wrote the batch but for the
				// dropped points.
				s.stats.Rejected += int64(we.Dropped)
				s.stats.Points += int64(points - we.Dropped)
			} else {
				s.stats.Rejected += int64(points)
			}
			s.mu.Unlock()
			s.cfg.logger.Warn("influx batch rejected", "err", we)
			if s.cfg.onReject != nil {
				s.cfg.onReject(we, []byte(body))
			}
			return nil
		}
		wasOpen := s.breaker.State() != streaming.BreakerClosed
		s.breaker.Failure()
		s.mu.Lock()
		s.lastErr = we
		s.stats.Retries++
		if !wasOpen && s.breaker.State() == streaming.BreakerOpen {
			s.stats.BreakerOpened++
			s.cfg.logger.Warn("influx breaker opened", "endpoint", s.endpoint, "failures", s.breaker.ConsecutiveFailures(), "err", we)
		}
		s.mu.Unlock()
		wait := backoff/2 + rand.N(backoff/2+1)
		if retryAfter > 0 {
			wait = max(wait, retryAfter)
		}
		backoff = min(2*backoff, s.cfg.retryMax)
		s.cfg.logger.Debug("influx write retry", "err", we, "wait", wait)
		if !s.sleep(ctx, wait) {
			return errStopped
		}
	}
}

// sleep waits d; false when the sink is stopping.
func (s *Sink) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-s.stop:
		return false
	}
}

// classify turns a client error into a *WriteError and the server's
// Retry-After.
func (s *Sink) classify(err error, points, attempt int) (*WriteError, time.Duration) {
	we := &WriteError{Endpoint: s.endpoint, Bucket: s.bucket, Points: points, Attempts: attempt, Message: err.Error()}
	var retryAfter time.Duration
	var he *ihttp.Error
	if errors.As(err, &he) {
		we.StatusCode = he.StatusCode
		if he.StatusCode != 0 {
			msg := strings.TrimSpace(he.Message)
			if msg == "" && he.Err != nil {
				msg = he.Err.Error()
			}
			if msg == "" {
				msg = http.StatusText(he.StatusCode)
			}
			we.Message = msg
		}
		retryAfter = time.Duration(he.RetryAfter) * time.Second
		switch he.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			we.Err = ErrUnauthorized
		case http.StatusNotFound:
			we.Err = ErrNoBucket
		case http.StatusInternalServerError:
			// InfluxDB 1.8 answers a write to a retention policy its
			// database lacks with a 500, not a 404: retried, it failed
			// every request until Flush's ctx ended, naming nothing.
			if strings.Contains(we.Message, "retention policy not found") {
				we.Err = ErrNoBucket
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
			we.Err = ErrRejected
			we.Dropped = partialDropped(we.Message, points)
		case http.StatusRequestTimeout, http.StatusTooManyRequests:
			// Retried.
		default:
			// Any other 4xx (405 from a proxy, 415, ...) answers every
			// retry alike: they were retried for ever.
			if he.StatusCode >= 400 && he.StatusCode < 500 {
				we.Err = ErrRefused
			}
		}
	}
	var cve *tls.CertificateVerificationError
	var uae x509.UnknownAuthorityError
	var hne x509.HostnameError
	var cie x509.CertificateInvalidError
	if errors.As(err, &cve) || errors.As(err, &uae) || errors.As(err, &hne) || errors.As(err, &cie) {
		we.Err = ErrTLS
	}
	if s.cfg.token != "" {
		we.Message = strings.ReplaceAll(we.Message, s.cfg.token, "[redacted]")
	}
	return we, retryAfter
}

// partialDropped is how many of a batch of points the server dropped in a
// partial write, from its message ("partial write: ... dropped=N"; the
// last dropped= counts them all), or 0 when the message is not a partial
// write's or its count is not below points (then the whole batch failed,
// as far as is known).
func partialDropped(msg string, points int) int {
	if !strings.Contains(msg, "partial write") {
		return 0
	}
	i := strings.LastIndex(msg, "dropped=")
	if i < 0 {
		return 0
	}
	digits := msg[i+len("dropped="):]
	if j := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
		digits = digits[:j]
	}
	n, err := strconv.Atoi(digits)
	if err != nil || n <= 0 || n >= points {
		return 0
	}
	return n
}
