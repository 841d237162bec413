package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"

	"github.com/tflo-io/tflo/streaming"
	"github.com/twmb/franz-go/pkg/kgo"
)

// PublisherOption configures a Publisher.
type PublisherOption func(*publisherConfig)

type publisherConfig struct {
	brokers     []string
	topic       string
	security    Security
	maxBuffered int
	log         *slog.Logger
	kgoOpts     []kgo.Opt
}

func defaultPublisherConfig() publisherConfig {
	return publisherConfig{maxBuffered: 10000, log: slog.New(slog.DiscardHandler)}
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

// PublisherClientOptions adds raw franz-go client options.
func PublisherClientOptions(o ...kgo.Opt) PublisherOption {
	return func(c *publisherConfig) { c.kgoOpts = append(c.kgoOpts, o...) }
}

// Publisher produces records keyed by sensor id with franz-go's idempotent
// producer (default on: retries never duplicate or reorder a partition's
// records), so one sensor's events stay in order in one partition. Publish
// is asynchronous with a bounded buffer; Flush (a checkpoint calls it
// before saving state) waits for every buffered record and reports the
// first failure. Safe for concurrent use.
type Publisher struct {
	cfg      publisherConfig
	cl       *kgo.Client
	err      atomic.Pointer[error]
	produced atomic.Uint64
	failed   atomic.Uint64
	closed   atomic.Bool
	inflight *barrier
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
	sec, err := cfg.security.kgoOpts()
	if err != nil {
		return nil, err
	}
	base := append([]kgo.Opt{kgo.SeedBrokers(cfg.brokers...)}, sec...)
	if err := checkConnect(ctx, cfg.brokers, cfg.kgoOpts, fmt.Sprintf("kafka publisher (topic %q)", cfg.topic), cfg.security); err != nil {
		return nil, err
	}
	all := append(base, kgo.DefaultProduceTopic(cfg.topic), kgo.MaxBufferedRecords(cfg.maxBuffered))
	all = append(all, cfg.kgoOpts...)
	cl, err := kgo.NewClient(all...)
	if err != nil {
		return nil, fmt.Errorf("kafka publisher (topic %q): %w", cfg.topic, err)
	}
	return &Publisher{cfg: cfg, cl: cl, inflight: newBarrier()}, nil
}

// Publish buffers one record keyed by key. It blocks while the buffer is
// full (until ctx is done) and returns the first earlier delivery failure,
// if any.
func (p *Publisher) Publish(ctx context.Context, key string, value []byte, headers ...kgo.RecordHeader) error {
	if p.closed.Load() {
		return ErrClosed
	}
	if e := p.err.Load(); e != nil {
		return *e
	}
	rec := &kgo.Record{Key: []byte(key), Value: value, Headers: headers}
	// kgo blocks Produce while the buffer is full; when ctx ends first
	// the record is failed with ctx's error (by an asynchronous promise).
	// That failure goes back to this caller, not into the sticky error.
	result := make(chan error, 1)
	gen := p.inflight.add()
	p.cl.Produce(ctx, rec, func(_ *kgo.Record, err error) {
		defer p.inflight.done(gen)
		if err == nil {
			p.produced.Add(1)
		} else {
			p.failed.Add(1)
			if ctx.Err() == nil || !errors.Is(err, ctx.Err()) {
				e := fmt.Errorf("publish key %q to %q: %w", key, p.cfg.topic, err)
				p.err.CompareAndSwap(nil, &e)
				p.cfg.log.Error("publish failed", "err", e)
			}
		}
		result <- err
	})
	if ctx.Err() == nil {
		return nil
	}
	// ctx ended while we were (perhaps) blocked: a record cancelled
	// before it was sent is failed promptly, so wait for its fate.
	if err := <-result; err != nil {
		if errors.Is(err, ctx.Err()) {
			return fmt.Errorf("publish key %q to %q: buffer full: %w", key, p.cfg.topic, err)
		}
		return fmt.Errorf("publish key %q to %q: %w", key, p.cfg.topic, err)
	}
	return nil
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

// Failed returns how many records failed.
func (p *Publisher) Failed() uint64 { return p.failed.Load() }

// Buffered returns how many records wait for acknowledgement.
func (p *Publisher) Buffered() int64 { return p.cl.BufferedProduceRecords() }

// Close flushes nothing (call Flush first to keep buffered records: Close
// is a Stop) and releases the client. Idempotent.
func (p *Publisher) Close() {
	if p.closed.CompareAndSwap(false, true) {
		p.cl.Close()
	}
}
