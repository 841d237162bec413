package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tflo-io/tflo/internal/lograte"
	"github.com/tflo-io/tflo/streaming"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// PublisherOption configures a Publisher.
type PublisherOption func(*publisherConfig)

type publisherConfig struct {
	brokers     []string
	topic       string
	dlqTopic    string
	security    Security
	maxBuffered int
	log         *slog.Logger
	kgoOpts     []kgo.Opt
	lazy        bool
}

// DefaultMaxBuffered is how many records a Publisher buffers unless
// PublisherMaxBuffered says otherwise.
const DefaultMaxBuffered = 10000

func defaultPublisherConfig() publisherConfig {
	return publisherConfig{maxBuffered: DefaultMaxBuffered, log: slog.New(slog.DiscardHandler)}
}

func (c *publisherConfig) validate() error {
	switch {
	case len(c.brokers) == 0:
		return errors.New("kafka publisher: no seed brokers (PublishTo)")
	case c.topic == "":
		return errors.New("kafka publisher: no topic (PublishTo)")
	case c.maxBuffered < 1:
		return fmt.Errorf("kafka publisher: buffer of %d records must hold at least 1", c.maxBuffered)
	case c.log == nil:
		return errors.New("kafka publisher: nil logger")
	}
	return c.security.Validate()
}

// PublishTo sets the seed brokers and the topic. Required.
func PublishTo(topic string, brokers ...string) PublisherOption {
	return func(c *publisherConfig) { c.topic, c.brokers = topic, append(c.brokers, brokers...) }
}

// PublisherDeadLetterTopic sets where a record too large for the broker
// (MESSAGE_TOO_LARGE) goes instead, truncated (see TruncateDeadLetter).
// Default "<topic>.dlq".
func PublisherDeadLetterTopic(topic string) PublisherOption {
	return func(c *publisherConfig) { c.dlqTopic = topic }
}

// PublisherSecurity sets TLS and SASL (default none).
func PublisherSecurity(s Security) PublisherOption {
	return func(c *publisherConfig) { c.security = s }
}

// PublisherMaxBuffered bounds the records buffered but not yet
// acknowledged (default 10,000). When full, Publish blocks: the
// back-pressure reaches the caller, which stops pulling its source.
func PublisherMaxBuffered(n int) PublisherOption {
	return func(c *publisherConfig) { c.maxBuffered = n }
}

// PublisherLogger sets the logger (default discards).
func PublisherLogger(l *slog.Logger) PublisherOption {
	return func(c *publisherConfig) { c.log = l }
}

// PublisherLazy makes NewPublisher wait for no connection: the client
// dials when it first produces, so unreachable brokers or refused
// credentials show in delivery failures, not in NewPublisher's error, and
// the topics' max.message.bytes are read in the background, best effort
// (a Publish or PublishDeadLetter waits for that read, until its ctx
// ends), not before NewPublisher returns: batches are kept under them
// from then on, and a record larger than the topic's fails its produce
// (MESSAGE_TOO_LARGE; then it is dead-lettered, truncated) instead of
// being truncated before it is buffered. For a producer beside a consumer
// of the same cluster (a Kafka source's dead letters), whose start checks
// the brokers and the credentials once already.
func PublisherLazy() PublisherOption { return func(c *publisherConfig) { c.lazy = true } }

// PublisherClientOptions adds raw franz-go client options.
func PublisherClientOptions(o ...kgo.Opt) PublisherOption {
	return func(c *publisherConfig) { c.kgoOpts = append(c.kgoOpts, o...) }
}

// Publisher produces records keyed by sensor id with franz-go's idempotent
// producer (default on: retries never duplicate or reorder a partition's
// records), so one sensor's events stay in order in one partition. Publish
// is asynchronous with a bounded buffer; Flush (a checkpoint calls it
// before saving state) waits for the records published before it and
// reports the first failure. Safe for concurrent use.
type Publisher struct {
	cfg          publisherConfig
	cl           *kgo.Client
	batchMax     int // cl's ProducerBatchMaxBytes, read once (batchLimit)
	err          atomic.Pointer[error]
	produced     atomic.Uint64
	failed       atomic.Uint64
	deadLettered atomic.Uint64
	closed       atomic.Bool
	// accept guards closing: a Publish holds it (read) from its closing
	// check to its barrier add, so once stopAccepting returns every record
	// it let in is in a generation a Flush waits for.
	accept    sync.RWMutex
	closing   chan struct{} // closed by stopAccepting: Publish refuses
	closeOnce sync.Once
	inflight  *barrier
	// room holds a token for each record buffered through Publish or
	// PublishDeadLetter (PublisherMaxBuffered of them): the wait for room
	// happens here, where the caller's context may end it, and never in
	// kgo (see Publish).
	room chan struct{}
	// dlqLog and dlqLostLog sample the per-record dead-letter lines (a
	// producer of oversized records would flood the log; the counters see
	// every record).
	dlqLog, dlqLostLog *lograte.Limiter
	// limits are the batch caps per topic; stopLearning ends a lazy
	// client's reading of them (batchLimits.learn), so Close does not
	// wait for it.
	limits       *batchLimits
	stopLearning context.CancelFunc
}

// NewPublisher validates the options, checks that the cluster accepts the
// credentials (a wrong password fails here, once, wrapping
// ErrAuthentication) and returns the Publisher.
func NewPublisher(ctx context.Context, opts ...PublisherOption) (*Publisher, error) {
	cfg := defaultPublisherConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.dlqTopic == "" {
		cfg.dlqTopic = cfg.topic + ".dlq"
	}
	sec, err := cfg.security.kgoOpts()
	if err != nil {
		return nil, err
	}
	base := append([]kgo.Opt{kgo.SeedBrokers(cfg.brokers...)}, sec...)
	// kgo's own bound is never reached (Publish waits for room first);
	// twice the room covers a record whose promise, before kgo uncounts
	// it, buffers its dead letter in its place.
	all := append(base, kgo.DefaultProduceTopic(cfg.topic), kgo.MaxBufferedRecords(2*cfg.maxBuffered))
	// Batches the broker would refuse whole would fail (and dead-letter)
	// every record in them, and drop every dead letter in them: keep each
	// under its topic's limit (the topic's and the dead-letter topic's
	// may differ), so only a record too large on its own is refused.
	// The limits are read with the client's own options: credentials or
	// a dialer given as raw kgo options (PublisherClientOptions) would
	// otherwise be missing there, the read refused and the limit left at
	// kgo's default.
	desc := append(slices.Clip(base), cfg.kgoOpts...)
	learnCtx, stopLearning := context.WithCancel(context.Background())
	limits := &batchLimits{m: map[string]int32{}, def: defaultBatchMaxBytes, desc: desc, stop: learnCtx, learns: make(chan struct{}, 1),
		topics: []string{cfg.topic, cfg.dlqTopic}}
	if !cfg.lazy {
		if err := checkConnect(ctx, cfg.brokers, cfg.kgoOpts, fmt.Sprintf("kafka publisher (topic %q)", cfg.topic), cfg.security); err != nil {
			stopLearning()
			return nil, err
		}
		// Both limits are known up front (the topic's is batchLimit,
		// which truncates a dead letter before it is buffered); a lazy
		// client reads them in the background.
		if err := limits.learn(ctx); err != nil {
			stopLearning()
			return nil, fmt.Errorf("kafka publisher (topic %q): %w", cfg.topic, err)
		}
		limits.def = limits.m[cfg.topic]
	} else {
		// In the background: the first publish (often a shard's first
		// dead letter, on its hot path) rarely waits for it.
		go limits.learnOnce()
	}
	all = append(all, kgo.ProducerBatchMaxBytesFn(limits.get))
	all = append(all, cfg.kgoOpts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		stopLearning()
		return nil, fmt.Errorf("kafka publisher (topic %q): %w", cfg.topic, err)
	}
	return &Publisher{cfg: cfg, cl: cl, batchMax: batchLimit(cl), limits: limits, inflight: newBarrier(), room: make(chan struct{}, cfg.maxBuffered), closing: make(chan struct{}),
		dlqLog: lograte.New(), dlqLostLog: lograte.New(), stopLearning: stopLearning}, nil
}

// batchLimits are a publisher's batch caps per topic: each topic's
// max.message.bytes when below kgo's default. get is kgo's
// ProducerBatchMaxBytesFn; kgo calls it in its metadata loop when it
// discovers a partition (and keeps the answer, so the hot path never
// pays for it), so it never dials: a slow DescribeConfigs there held the
// loop, and every produce waiting for metadata, for up to 10 s. The
// limits are read before the publisher produces instead (learn): up
// front, or for a lazy publisher in the background, which its first
// publish waits for. A topic whose limit is not known, or cannot be
// read, keeps kgo's default.
type batchLimits struct {
	mu     sync.Mutex
	m      map[string]int32
	def    int32 // what "" gets (kgo's validation, batchLimit)
	known  atomic.Bool
	learns chan struct{} // a token: one learn at a time, waited for until ctx ends
	desc   []kgo.Opt
	stop   context.Context // ended by Close
	topics []string
}

func (l *batchLimits) get(topic string) int32 {
	if topic == "" {
		return l.def
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if limit, ok := l.m[topic]; ok {
		return limit
	}
	return defaultBatchMaxBytes
}

// learnOnce is a lazy publisher's learn, until Close.
func (l *batchLimits) learnOnce() { _ = l.learn(l.stop) }

// learn reads the limits of the publisher's topics, once; it fails only
// when ctx ends (or Close is called) first.
func (l *batchLimits) learn(ctx context.Context) error {
	if l.known.Load() {
		return nil
	}
	select {
	case l.learns <- struct{}{}:
		defer func() { <-l.learns }()
	case <-ctx.Done():
		return fmt.Errorf("reading max.message.bytes of %q: %w", l.topics[0], ctx.Err())
	case <-l.stop.Done():
		return ErrClosed
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(l.stop, cancel)()
	if l.known.Load() { // learnt while this call waited for its turn
		return nil
	}
	for _, topic := range l.topics {
		l.mu.Lock()
		_, ok := l.m[topic]
		l.mu.Unlock()
		if ok {
			continue
		}
		limit := int32(defaultBatchMaxBytes)
		n, ok := topicMaxMessageBytes(ctx, l.desc, topic)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("reading max.message.bytes of %q: %w", topic, err)
		}
		if ok {
			limit = min(max(n, minBatchMaxBytes), limit)
		}
		l.mu.Lock()
		l.m[topic] = limit
		l.mu.Unlock()
	}
	l.known.Store(true)
	return nil
}

// minBatchMaxBytes is the lowest batch cap kgo takes: below it, it fails
// every produce to the topic.
const minBatchMaxBytes = 512

// defaultBatchMaxBytes is kgo's default ProducerBatchMaxBytes.
const defaultBatchMaxBytes = 1_000_012

// topicMaxMessageBytes reads topic's max.message.bytes (the broker's
// default when the topic does not set it), best effort: false when the
// topic does not exist yet or the configs may not be described.
func topicMaxMessageBytes(ctx context.Context, base []kgo.Opt, topic string) (int32, bool) {
	cl, err := kgo.NewClient(base...)
	if err != nil {
		return 0, false
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rcs, err := kadm.NewClient(cl).DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return 0, false
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		return 0, false
	}
	for _, c := range rc.Configs {
		if c.Key == "max.message.bytes" && c.Value != nil {
			n, err := strconv.ParseInt(*c.Value, 10, 32)
			return int32(n), err == nil && n > 0
		}
	}
	return 0, false
}

// Publish buffers one record keyed by key. It blocks while the buffer is
// full, until ctx is done (then the record is not buffered and the error
// says so; this is not a delivery failure), and returns the first earlier
// delivery failure, if any. Once buffered, a record is out of ctx's
// reach: ending ctx never fails it.
//
// A record too large for the client's batch limit or for the broker
// (MESSAGE_TOO_LARGE) is not a delivery failure: its dead letter goes to
// the dead-letter topic instead (PublisherDeadLetterTopic), truncated
// (see TruncateDeadLetter), it is counted in DeadLettered, and later
// publishes carry on — one oversized signal never stops the publisher.
func (p *Publisher) Publish(ctx context.Context, key string, value []byte, headers ...kgo.RecordHeader) error {
	if p.closed.Load() {
		return fmt.Errorf("publish key %s to %q: %w", streaming.QuoteKey(key), p.cfg.topic, ErrClosed)
	}
	if e := p.err.Load(); e != nil {
		return *e
	}
	// The wait for room is ours, not kgo's: kgo would wait with ctx and
	// then keep it as the buffered record's context, and a buffered
	// record whose context ends fails with every record buffered for its
	// partition (kgo.Client.Produce), other callers' too. So a caller
	// that gives up (a shard being released) could fail the publisher;
	// kgo gets a context that never ends instead.
	if err := p.limits.learn(ctx); err != nil {
		return fmt.Errorf("publish key %s to %q: %w", streaming.QuoteKey(key), p.cfg.topic, err)
	}
	if err := p.waitRoom(ctx); err != nil {
		return fmt.Errorf("publish key %s to %q: buffer full: %w", streaming.QuoteKey(key), p.cfg.topic, err)
	}
	p.accept.RLock()
	defer p.accept.RUnlock()
	if p.isClosing() {
		<-p.room
		return fmt.Errorf("publish key %s to %q: %w", streaming.QuoteKey(key), p.cfg.topic, ErrClosed)
	}
	rec := &kgo.Record{Topic: p.cfg.topic, Key: []byte(key), Value: value, Headers: headers}
	dead := overLimit(rec, p.batchMax)
	if dead {
		rec = p.deadLetterOf(rec, fmt.Errorf("%w: %d bytes, over the producer's batch limit", kerr.MessageTooLarge, recordBytes(rec)))
	}
	bg := context.WithoutCancel(ctx)
	gen := p.inflight.add()
	p.cl.Produce(bg, rec, func(r *kgo.Record, err error) {
		done := func() { p.inflight.done(gen); <-p.room }
		switch {
		case err == nil:
			if !dead {
				p.produced.Add(1)
			}
		case errors.Is(err, kerr.MessageTooLarge) && !dead:
			// The broker's limit is below the client's. Inside a promise:
			// TryProduce buffers before returning, so Flush waits for it;
			// the record's generation and room end with its dead
			// letter's fate.
			next := done
			done = func() {}
			p.cl.TryProduce(bg, p.deadLetterOf(r, err), func(r *kgo.Record, err error) {
				defer next()
				p.deadLetterDone(r, err)
			})
		case errors.Is(err, kerr.MessageTooLarge):
			p.deadLetterDone(r, err) // even the truncated dead letter: dropped, logged
		default:
			p.failed.Add(1)
			p.fail(fmt.Errorf("publish key %s to %q: %w", streaming.QuoteKey(key), r.Topic, err))
		}
		done()
	})
	return nil
}

// waitRoom takes a token of room for one record, waiting while the
// buffer is full until ctx is done.
func (p *Publisher) waitRoom(ctx context.Context) error {
	select {
	case p.room <- struct{}{}:
		return nil
	default:
	}
	select {
	case p.room <- struct{}{}:
		return nil
	case <-p.closing:
		return ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Publisher) isClosing() bool {
	select {
	case <-p.closing:
		return true
	default:
		return false
	}
}

// stopAccepting makes Publish and PublishDeadLetter refuse new records
// (ErrClosed), waking those waiting for room; when it returns, every
// record they accepted is covered by a Flush begun afterwards.
func (p *Publisher) stopAccepting() {
	p.accept.Lock()
	p.closeOnce.Do(func() { close(p.closing) })
	p.accept.Unlock()
}

// fail records the first delivery failure: every later Publish and Flush
// returns it.
func (p *Publisher) fail(err error) {
	p.err.CompareAndSwap(nil, &err)
	p.cfg.log.Error("publish failed", "err", err)
}

// PublishDeadLetter buffers dl, a dead letter (see DeadLetter) for the
// publisher's topic, sent as ProduceDeadLetter sends it: truncated when
// too large for the client or the broker. Flush waits for it. A dead
// letter that is lost is the sticky error (every later Publish and Flush
// returns it): the cursor must not move past a record whose dead letter
// was lost. One dropped because even truncated it is too large is only
// counted in Failed (ProduceDeadLetter). Like Publish, it waits for room
// until ctx is done (then dl is not buffered and the error says so).
func (p *Publisher) PublishDeadLetter(ctx context.Context, dl *kgo.Record) error {
	if p.closed.Load() {
		return fmt.Errorf("dead letter of %s to %q: %w", dlqSource(dl), p.cfg.topic, ErrClosed)
	}
	if e := p.err.Load(); e != nil {
		return *e
	}
	if err := p.limits.learn(ctx); err != nil {
		return fmt.Errorf("dead letter of %s to %q: %w", dlqSource(dl), p.cfg.topic, err)
	}
	if err := p.waitRoom(ctx); err != nil {
		return fmt.Errorf("dead letter of %s to %q: buffer full: %w", dlqSource(dl), p.cfg.topic, err)
	}
	p.accept.RLock()
	defer p.accept.RUnlock()
	if p.isClosing() {
		<-p.room
		return fmt.Errorf("dead letter of %s to %q: %w", dlqSource(dl), p.cfg.topic, ErrClosed)
	}
	dl.Topic = p.cfg.topic
	gen := p.inflight.add()
	produceDeadLetter(context.WithoutCancel(ctx), p.cl, p.batchMax, dl, p.cfg.log, func(r *kgo.Record, err error) {
		defer func() { p.inflight.done(gen); <-p.room }()
		if err == errDeadLetterDropped { // lost, and logged; its size fails no Flush
			p.failed.Add(1)
			return
		}
		if err != nil {
			p.failed.Add(1)
			p.fail(fmt.Errorf("dead letter of %s to %q: %w", dlqSource(r), r.Topic, err))
			return
		}
		p.produced.Add(1)
	})
	return nil
}

// dlqSource names a dead letter's source record: topic/partition@offset,
// from its headers.
func dlqSource(r *kgo.Record) string {
	var topic, part, off string
	for _, h := range r.Headers {
		switch h.Key {
		case HeaderDLQTopic:
			topic = string(h.Value)
		case HeaderDLQPartition:
			part = string(h.Value)
		case HeaderDLQOffset:
			off = string(h.Value)
		}
	}
	return topic + "/" + part + "@" + off
}

// deadLetterOf counts rec as dead-lettered for cause and returns the
// truncated dead letter to produce instead.
func (p *Publisher) deadLetterOf(rec *kgo.Record, cause error) *kgo.Record {
	p.deadLettered.Add(1)
	if ok, skipped := p.dlqLog.Allow(); ok {
		p.cfg.log.Warn("record too large for the broker; dead-lettered", lograte.With(skipped, "topic", p.cfg.topic, "key", streaming.QuoteKey(rec.Key),
			"bytes", recordBytes(rec), "dlq", p.cfg.dlqTopic, "err", cause)...)
	}
	src := *rec
	src.Topic, src.Partition, src.Offset = p.cfg.topic, -1, -1
	return TruncateDeadLetter(DeadLetter(p.cfg.dlqTopic, "", &src, cause))
}

// deadLetterDone is the promise of a dead letter produced from a promise:
// a dead letter that is lost is a lost record, so it becomes the sticky
// error — unless even its truncated copy is too large, which can never
// succeed and must not stop the publisher (it is counted in Failed).
func (p *Publisher) deadLetterDone(r *kgo.Record, err error) {
	switch {
	case err == nil:
	case errors.Is(err, kerr.MessageTooLarge):
		p.failed.Add(1) // lost, though it fails no Flush (as PublishDeadLetter counts it)
		if ok, skipped := p.dlqLostLog.Allow(); ok {
			p.cfg.log.Error("dead letter dropped: too large for the broker even truncated", lograte.With(skipped, "dlq", r.Topic, "key", streaming.QuoteKey(r.Key), "err", err)...)
		}
	default:
		p.failed.Add(1)
		p.fail(fmt.Errorf("dead-letter key %s of %q to %q: %w", streaming.QuoteKey(r.Key), p.cfg.topic, r.Topic, err))
	}
}

// PublishSignal encodes sig in the current envelope (with its source
// record and epoch, when known) and publishes it keyed by sig.Key.
func PublishSignal[M comparable, P any](ctx context.Context, p *Publisher, sig streaming.Signal[M, P], src *EnvelopeSource, epoch streaming.Epoch) error {
	b, err := EncodeSignal(sig, src, epoch)
	if err != nil {
		return err
	}
	return p.Publish(ctx, sig.Key, b, kgo.RecordHeader{Key: HeaderEnvelope, Value: []byte("signal/" + strconv.Itoa(EnvelopeVersion))})
}

// Flush waits until every record published before the call is
// acknowledged (not for records published meanwhile: a checkpoint's flush
// ends in bounded time under any load) and returns the first delivery
// failure since the Publisher started.
func (p *Publisher) Flush(ctx context.Context) error {
	if err := flushBefore(ctx, p.cl, p.inflight); err != nil {
		return fmt.Errorf("flush publisher of %q: %w", p.cfg.topic, err)
	}
	if e := p.err.Load(); e != nil {
		return *e
	}
	return nil
}

// Produced returns how many records were acknowledged.
func (p *Publisher) Produced() uint64 { return p.produced.Load() }

// Failed returns how many records failed, a dead letter dropped because
// even truncated it was too large for the broker included.
func (p *Publisher) Failed() uint64 { return p.failed.Load() }

// DeadLettered returns how many records went to the dead-letter topic for
// being too large for the broker.
func (p *Publisher) DeadLettered() uint64 { return p.deadLettered.Load() }

// Buffered returns how many records wait for acknowledgement (kgo's
// count, which a record leaves just after its promise ran: right after
// Flush returns it may still count the last records for an instant).
func (p *Publisher) Buffered() int64 { return p.cl.BufferedProduceRecords() }

// Close flushes nothing (call Flush first to keep buffered records: Close
// is a Stop) and releases the client. Idempotent.
func (p *Publisher) Close() {
	if p.closed.CompareAndSwap(false, true) {
		p.stopLearning()
		p.cl.Close()
	}
}

// Ping reports whether a broker of the publisher's cluster answers (a
// metadata request); the error names the brokers.
func (p *Publisher) Ping(ctx context.Context) error {
	if err := p.cl.Ping(ctx); err != nil {
		return fmt.Errorf("kafka publisher (brokers %v): ping: %w", p.cfg.brokers, err)
	}
	return nil
}
