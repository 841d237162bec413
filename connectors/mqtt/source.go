package mqtt

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session"

	"github.com/tflo-io/tflo/internal/lograte"
	"github.com/tflo-io/tflo/streaming"
)

// Message is one decoded reading as the handler sees it.
type Message struct {
	Topic     string
	PacketID  uint16 // 0 for QoS 0
	QoS       byte
	Retain    bool // delivered because it was retained (a new subscription)
	Duplicate bool // the broker flagged it as a redelivery
	Reading   Reading
}

// Handler processes one message. It is called from one goroutine, in
// receive order, while the source's cut lock is held (see Source.Cut). A
// non-nil error stops Run; the message stays unacknowledged so the broker
// redelivers it to the persistent session. An error wrapping ErrRefused
// dead-letters the message instead, with the error as the reason.
type Handler func(ctx context.Context, m Message) error

// Source consumes sensor readings from an MQTT v5 broker: QoS 2
// subscriptions on a persistent session, reconnect with backoff, dedup of
// redeliveries through a streaming.MQTTCursor, dead-lettering of malformed
// payloads. See the package doc for the processing order.
type Source struct {
	cfg config

	mu  sync.Mutex // held while a message is handled and by Cut
	cur *streaming.MQTTCursor
	// With WithAckOnCheckpoint: handled messages awaiting a saved cut, in
	// receive order, and the connection they arrived on. Guarded by mu.
	pending    []*paho.Publish
	pendingCli *paho.Client
	// sizes mirrors what Stats reports of the state mu guards, updated
	// under mu (mirrorLocked): Stats never waits for mu, which a handler
	// holds while its sink waits for room, so a metrics scrape answers
	// under back-pressure.
	sizes sourceSizes

	ctr      counters
	newestTS atomic.Int64
	running  atomic.Bool
	// conn is Run's connection (nil outside Run): dead letters are
	// published on it. connSet closes once Run has set it (or failed to
	// make it): the connection may deliver a message before Run's
	// goroutine stores it.
	conn    atomic.Pointer[autopaho.ConnectionManager]
	connSet chan struct{}
	// link is the state of Run's connection that Stats reports: whether
	// it is up, and whether the source has subscribed on it.
	link link
	// dlqLog samples the per-message dead-letter line (a stream of bad
	// payloads would write one each); the counters count them all.
	dlqLog *lograte.Limiter
}

// link is the state of the source's connection. gen counts the
// connections made: a subscribe that succeeds on one already gone (its
// SUBACK just before the drop) does not mark the next one subscribed.
type link struct {
	mu             sync.Mutex
	gen            uint64
	up, subscribed bool
}

// connUp records a new connection and returns its generation.
func (l *link) connUp() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gen++
	l.up, l.subscribed = true, false
	return l.gen
}

// connDown records that the connection is gone.
func (l *link) connDown() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gen++
	l.up, l.subscribed = false, false
}

// subscribedOn records a subscribe acknowledged on connection gen.
func (l *link) subscribedOn(gen uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gen == gen && l.up {
		l.subscribed = true
	}
}

func (l *link) state() (up, subscribed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.up, l.subscribed
}

// Test hooks, nil outside tests: testHookConnMade runs in Run between
// making the connection and storing it, testHookWaitConn when a dead
// letter waits for Run to store it.
var testHookConnMade, testHookWaitConn func()

// testHookFirstPublish, when set, runs a dead letter's first publish
// (publish) and may return an error instead of running it (tests).
var testHookFirstPublish func(publish func() error) error

// NewSource validates the options and returns a Source; nothing connects
// until Run.
func NewSource(opts ...Option) (*Source, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("mqtt source: %w", err)
	}
	var cur *streaming.MQTTCursor
	var err error
	if len(cfg.cursor) > 0 {
		cur, err = streaming.ParseMQTTCursor(cfg.cursor)
	} else {
		cur, err = streaming.NewMQTTCursor(cfg.windowCap, cfg.retainedCap)
	}
	if err != nil {
		return nil, fmt.Errorf("mqtt source %q: %w", cfg.clientID, err)
	}
	s := &Source{cfg: cfg, cur: cur, ctr: counters{hook: cfg.counters}, dlqLog: lograte.New(), connSet: make(chan struct{})}
	s.mirrorLocked() // no one else has s yet
	return s, nil
}

// sourceSizes are the cursor's sizes and the acknowledgements pending,
// each stored on its own (a message handled allocates nothing for them):
// Stats may read one from before and another from after the same
// message.
type sourceSizes struct{ windowLen, windowCap, retainedLen, retainedCap, pending atomic.Int64 }

// mirrorLocked publishes the sizes Stats reports (s.mu held).
func (s *Source) mirrorLocked() {
	z := &s.sizes
	z.windowLen.Store(int64(s.cur.WindowLen()))
	z.windowCap.Store(int64(s.cur.WindowCap()))
	z.retainedLen.Store(int64(s.cur.RetainedLen()))
	z.retainedCap.Store(int64(s.cur.RetainedCap()))
	z.pending.Store(int64(len(s.pending)))
}

// Stats returns the counters and the cursor's sizes (as of the last
// message handled, cut or acknowledgement queued). It never waits for the
// message being handled, so a count may trail what the broker already
// shows: a dead letter is counted just after its publish returns.
func (s *Source) Stats() Stats {
	z := &s.sizes
	up, subscribed := s.link.state()
	return Stats{
		Connected:        up,
		Subscribed:       subscribed,
		Received:         s.ctr.get(CounterReceived),
		Processed:        s.ctr.get(CounterProcessed),
		Duplicates:       s.ctr.get(CounterDuplicates),
		RetainedSkipped:  s.ctr.get(CounterRetainedSkipped),
		DeadLettered:     s.ctr.get(CounterDeadLettered),
		DeadLetterFailed: s.ctr.get(CounterDeadLetterFailed),
		Connects:         s.ctr.get(CounterConnects),
		ConnectErrors:    s.ctr.get(CounterConnectErrors),
		Subscribes:       s.ctr.get(CounterSubscribes),
		NewestTS:         s.newestTS.Load(),
		WindowLen:        int(z.windowLen.Load()),
		WindowCap:        int(z.windowCap.Load()),
		RetainedLen:      int(z.retainedLen.Load()),
		RetainedCap:      int(z.retainedCap.Load()),
		PendingAcks:      int(z.pending.Load()),
	}
}

// Cut runs fn between two messages with the cursor's current encoding
// (streaming.MQTTCursor Bytes): the handler is not running while fn runs,
// so state the handler owns and the cursor agree. Checkpoints call it.
// fn must not call back into the Source.
func (s *Source) Cut(fn func(cursor []byte) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fn(s.cur.Bytes())
}

// ack acknowledges p now, or, with WithAckOnCheckpoint, queues it for the
// next saved cut.
func (s *Source) ack(cli *paho.Client, p *paho.Publish) {
	if !s.cfg.ackOnCheckpoint {
		if err := cli.Ack(p); err != nil {
			s.cfg.logger.Warn("mqtt ack failed", "client_id", s.cfg.clientID, "topic", p.Topic, "packet_id", p.PacketID, "err", err)
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.mirrorLocked()
	if s.pendingCli != cli {
		// A new connection: the broker redelivers whatever the old one left
		// unacknowledged, so those acks are void.
		s.pending, s.pendingCli = s.pending[:0], cli
	}
	s.pending = append(s.pending, p)
}

// CutWithAck is Cut for checkpoints: it also returns release, which the
// checkpoint calls exactly once when it ends. release(true) — the cut's
// state is durable — acknowledges every message the cut contains (with
// WithAckOnCheckpoint; otherwise they were acknowledged already);
// release(false) keeps them for the next cut. Acks of a connection that
// has since dropped are skipped: the broker redelivers those messages
// and the dedup window drops them.
func (s *Source) CutWithAck(fn func(cursor []byte) error) (release func(saved bool), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := fn(s.cur.Bytes()); err != nil {
		return func(bool) {}, err
	}
	msgs, cli := s.pending, s.pendingCli
	s.pending = nil
	s.mirrorLocked()
	var once sync.Once
	return func(saved bool) {
		once.Do(func() {
			if len(msgs) == 0 {
				return
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.pendingCli != cli {
				return
			}
			if !saved {
				s.pending = append(msgs, s.pending...)
				s.mirrorLocked()
				return
			}
			select {
			case <-cli.Done():
				return
			default:
			}
			for _, p := range msgs {
				if err := cli.Ack(p); err != nil {
					s.cfg.logger.Warn("mqtt ack failed", "client_id", s.cfg.clientID, "topic", p.Topic, "packet_id", p.PacketID, "err", err)
					return
				}
			}
		})
	}, nil
}

// Restore replaces the dedup cursor with one from a checkpoint
// (streaming.MQTTCursor Bytes), before Run. Corrupt bytes are refused with
// an error wrapping streaming.ErrCorrupt. A cursor with smaller
// capacities than WithDedupCapacity's (a checkpoint taken before they
// were raised) is grown to them, so the window still holds a full
// in-flight burst.
func (s *Source) Restore(cursor []byte) error {
	if s.running.Load() {
		return fmt.Errorf("mqtt source %q: Restore while running", s.cfg.clientID)
	}
	cur, err := streaming.ParseMQTTCursor(cursor)
	if err != nil {
		return fmt.Errorf("mqtt source %q: restore: %w", s.cfg.clientID, err)
	}
	s.mu.Lock()
	s.cur = cur.Grown(s.cfg.windowCap, s.cfg.retainedCap)
	s.mirrorLocked()
	s.mu.Unlock()
	return nil
}

// Run connects, subscribes and delivers messages to h until ctx is done
// (then it disconnects cleanly and returns nil), h returns an error (a
// *HandlerError), or the broker refuses the credentials (a *ConnectError
// wrapping ErrBadCredentials — Run does not retry those). Other connection
// failures are retried with backoff. Run may be called once.
func (s *Source) Run(ctx context.Context, h Handler) error {
	if !s.running.CompareAndSwap(false, true) {
		return fmt.Errorf("mqtt source %q: Run called twice: %w", s.cfg.clientID, ErrClosed)
	}
	runCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	log := s.cfg.logger.With("client_id", s.cfg.clientID)

	var subs sync.WaitGroup // subscribe goroutines, one per connection
	cc := s.clientConfig(runCtx, cancel, h, &subs)
	cm, err := autopaho.NewConnection(runCtx, cc)
	if err != nil {
		close(s.connSet)
		return fmt.Errorf("mqtt source %q: %w", s.cfg.clientID, err)
	}
	if testHookConnMade != nil {
		testHookConnMade()
	}
	s.conn.Store(cm)
	close(s.connSet)
	defer s.conn.Store(nil)
	<-runCtx.Done()
	<-cm.Done()
	subs.Wait()
	s.link.connDown() // autopaho calls no OnConnectionDown when it stops
	cause := context.Cause(runCtx)
	if ctx.Err() != nil && errors.Is(cause, ctx.Err()) {
		log.Info("mqtt source stopped")
		return nil
	}
	log.Error("mqtt source failed", "err", cause)
	return cause
}

func (s *Source) clientConfig(ctx context.Context, fail context.CancelCauseFunc, h Handler, subs *sync.WaitGroup) autopaho.ClientConfig {
	c := &s.cfg
	log := c.logger.With("client_id", c.clientID)
	initialMax := min(c.backoffMin*2, c.backoffMax)
	// The server of the connection attempt under way: autopaho builds its
	// CONNECT, then reports its failure, on one goroutine, and its
	// ConnackError does not say which of the servers refused.
	var attempting atomic.Pointer[url.URL]
	cc := autopaho.ClientConfig{
		ServerUrls:                    c.servers,
		TlsCfg:                        c.tls,
		KeepAlive:                     uint16(c.keepAlive.Seconds()),
		CleanStartOnInitialConnection: c.cleanStart,
		SessionExpiryInterval:         uint32(c.sessionExpiry.Seconds()),
		ConnectTimeout:                c.connectTimeout,
		ReconnectBackoff:              autopaho.NewExponentialBackoff(c.backoffMin, c.backoffMax, initialMax, 2),
		ConnectUsername:               c.username,
		ConnectPassword:               c.password,
		ConnectPacketBuilder: func(cp *paho.Connect, u *url.URL) (*paho.Connect, error) {
			attempting.Store(u)
			if cp.Properties == nil {
				cp.Properties = &paho.ConnectProperties{}
			}
			// Without this paho sends Request Problem Information = 0 and
			// the broker strips user properties (the dead-letter reason).
			cp.Properties.RequestProblemInfo = true
			if c.receiveMaximum > 0 {
				rm := c.receiveMaximum
				cp.Properties.ReceiveMaximum = &rm
			}
			if c.maxPacketSize > 0 {
				mps := c.maxPacketSize
				cp.Properties.MaximumPacketSize = &mps
			}
			return cp, nil
		},
		OnConnectionUp: func(cm *autopaho.ConnectionManager, ca *paho.Connack) {
			gen := s.link.connUp()
			s.ctr.inc(CounterConnects)
			log.Info("mqtt connected", "session_present", ca.SessionPresent)
			subs.Add(1)
			go func() {
				defer subs.Done()
				s.subscribe(ctx, fail, cm, gen)
			}()
		},
		OnConnectionDown: func() bool {
			s.link.connDown()
			return true // reconnect
		},
		OnConnectError: func(err error) {
			s.ctr.inc(CounterConnectErrors)
			var ce *autopaho.ConnackError
			if errors.As(err, &ce) && (ce.ReasonCode == packets.ConnackBadUsernameOrPassword || ce.ReasonCode == packets.ConnackNotAuthorized) {
				server := ""
				if u := attempting.Load(); u != nil {
					server = u.Redacted()
				}
				fail(&ConnectError{Server: server, Username: c.username, ReasonCode: ce.ReasonCode, Reason: ce.Reason, Err: ErrBadCredentials})
				return
			}
			log.Warn("mqtt connect failed; retrying with backoff", "err", err)
		},
		ClientConfig: paho.ClientConfig{
			ClientID:                   c.clientID,
			EnableManualAcknowledgment: true,
			PacketTimeout:              c.connectTimeout,
			SendAcksInterval:           c.ackInterval,
			OnClientError:              func(err error) { log.Warn("mqtt connection lost", "err", err) },
		},
	}
	cc.OnPublishReceived = []func(paho.PublishReceived) (bool, error){
		func(pr paho.PublishReceived) (bool, error) {
			if ctx.Err() != nil {
				return true, nil // stopping: leave unacked, the broker redelivers
			}
			if err := s.handle(ctx, pr.Client, pr.Packet, h); err != nil {
				if errors.Is(err, errNoAck) {
					return true, nil
				}
				fail(err)
				return true, err
			}
			if pr.Packet.QoS > 0 {
				s.ack(pr.Client, pr.Packet)
			}
			return true, nil
		},
	}
	return cc
}

// Fatal SUBACK reason codes: configuration errors that retrying cannot fix.
var fatalSubackCodes = map[byte]string{
	0x87: "not authorized",
	0x8F: "topic filter invalid",
	0x9E: "shared subscriptions not supported",
	0xA1: "subscription identifiers not supported",
	0xA2: "wildcard subscriptions not supported",
}

// subscribe subscribes on a fresh connection. A refusal with a fatal code,
// or paho's refusal to send a subscription the broker announced it does
// not support, stops Run; other refusals (0x91 packet identifier in use, 0x97 quota
// exceeded, ...) and a SUBACK that does not come within the packet
// timeout are retried with backoff while the connection lasts.
func (s *Source) subscribe(ctx context.Context, fail context.CancelCauseFunc, cm *autopaho.ConnectionManager, gen uint64) {
	sub := &paho.Subscribe{}
	for _, f := range s.cfg.filters {
		if s.cfg.shareGroup != "" {
			f = "$share/" + s.cfg.shareGroup + "/" + f
		}
		sub.Subscriptions = append(sub.Subscriptions, paho.SubscribeOptions{Topic: f, QoS: s.cfg.qos})
	}
	delay := s.cfg.backoffMin
	for attempt := 1; ; attempt++ {
		sa, err := cm.Subscribe(ctx, sub)
		if err == nil {
			s.link.subscribedOn(gen)
			s.ctr.inc(CounterSubscribes)
			s.cfg.logger.Info("mqtt subscribed", "client_id", s.cfg.clientID, "topics", s.cfg.filters)
			return
		}
		if sa == nil {
			if errors.Is(err, paho.ErrInvalidArguments) {
				// paho refused to send it: the broker's CONNACK said it
				// supports no wildcard (or shared) subscriptions. Every
				// attempt would fail alike, as a refusing SUBACK does.
				var topics []string
				for _, o := range sub.Subscriptions {
					topics = append(topics, strconv.Quote(o.Topic))
				}
				fail(fmt.Errorf("mqtt source %q: subscribe %s: %w", s.cfg.clientID, strings.Join(topics, ", "), err))
				return
			}
			if ctx.Err() != nil || lostConnection(err) {
				// Connection lost mid-subscribe: the next OnConnectionUp retries.
				s.cfg.logger.Warn("mqtt subscribe failed", "client_id", s.cfg.clientID, "err", err)
				return
			}
			// No SUBACK within the packet timeout (a slow broker) on a
			// connection still up: nothing else would subscribe again.
			s.cfg.logger.Warn("mqtt subscribe failed; retrying", "client_id", s.cfg.clientID, "attempt", attempt, "err", err)
		} else {
			for i, code := range sa.Reasons {
				if why, fatal := fatalSubackCodes[code]; fatal && i < len(sub.Subscriptions) {
					fail(fmt.Errorf("mqtt source %q: subscribe %q refused with reason code 0x%02x (%s)", s.cfg.clientID, sub.Subscriptions[i].Topic, code, why))
					return
				}
			}
			s.cfg.logger.Warn("mqtt subscribe refused; retrying", "client_id", s.cfg.clientID, "attempt", attempt, "reasons", sa.Reasons)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(delay*2, s.cfg.backoffMax)
	}
}

// handle runs one PUBLISH through dedup, decoding, the retained check and
// the handler. A nil return means the message may be acknowledged.
func (s *Source) handle(ctx context.Context, cli *paho.Client, p *paho.Publish, h Handler) error {
	s.ctr.inc(CounterReceived)
	s.mu.Lock()
	defer s.mu.Unlock()
	defer s.mirrorLocked()

	var id uint64
	if p.QoS > 0 {
		id = streaming.MQTTMessageID(p.Topic, p.PacketID, p.Payload)
		if s.cur.Seen(id) {
			s.ctr.inc(CounterDuplicates)
			return nil
		}
	}
	// A retained message the source dead-lettered comes again, under a
	// new packet id, on every subscribe: its topic and payload digest
	// recognise it.
	var digest uint64
	if p.Retain {
		digest = streaming.MQTTMessageID(p.Topic, 0, p.Payload)
		if d, ok := s.cur.RetainedDeadLetter(p.Topic); ok && d == digest {
			s.ctr.inc(CounterRetainedSkipped)
			return nil
		}
	}
	r, err := s.cfg.decoder(p.Topic, p.Payload)
	if err == nil {
		err = s.checkReading(p.Topic, r)
	}
	if err != nil {
		if err := s.deadLetter(ctx, cli, p, err); err != nil {
			return err
		}
		if p.QoS > 0 {
			s.cur.Observe(id, p.PacketID)
		}
		if p.Retain {
			s.cur.ObserveRetainedDeadLetter(p.Topic, digest)
		}
		return nil
	}
	seq := uint64(max(r.TS, 0))
	if p.Retain {
		if last, ok := s.cur.RetainedSeq(p.Topic); ok && seq <= last {
			s.ctr.inc(CounterRetainedSkipped)
			return nil
		}
	}
	m := Message{Topic: p.Topic, PacketID: p.PacketID, QoS: p.QoS, Retain: p.Retain, Duplicate: p.Duplicate(), Reading: r}
	if err := h(ctx, m); errors.Is(err, ErrRefused) {
		if err := s.deadLetter(ctx, cli, p, err); err != nil {
			return err
		}
		if p.QoS > 0 {
			s.cur.Observe(id, p.PacketID)
		}
		if p.Retain {
			s.cur.ObserveRetainedDeadLetter(p.Topic, digest)
		}
		return nil
	} else if err != nil {
		return &HandlerError{Topic: p.Topic, PacketID: p.PacketID, Err: err}
	}
	if p.QoS > 0 {
		s.cur.Observe(id, p.PacketID)
	}
	// Every processed message advances its topic's sequence, so a retained
	// copy of a message first seen live is recognised after a reconnect.
	s.cur.ObserveRetained(p.Topic, seq)
	if r.TS > s.newestTS.Load() {
		s.newestTS.Store(r.TS) // only this goroutine (under mu) writes it
	}
	s.ctr.inc(CounterProcessed)
	return nil
}

// checkReading applies the source's Limits and, with
// WithRequireTopicMatch, the topic rule to a decoded reading.
func (s *Source) checkReading(topic string, r Reading) error {
	if err := s.cfg.check.CheckReading(r.Sensor, r.TS, r.Value); err != nil {
		return err
	}
	if s.cfg.topicMatch {
		return CheckTopicMatch(topic, r.Sensor)
	}
	return nil
}

// CheckTopicMatch is WithRequireTopicMatch's rule: an error wrapping
// ErrTopicMismatch when sensor is not the last level of topic.
func CheckTopicMatch(topic, sensor string) error {
	last := topic[strings.LastIndexByte(topic, '/')+1:]
	if sensor != last {
		return fmt.Errorf("%w: sensor %s is not %s, the last level of topic %s",
			ErrTopicMismatch, streaming.QuoteKey(sensor), streaming.QuoteKey(last), streaming.QuoteKey(topic))
	}
	return nil
}

// Dead-letter user property keys.
const (
	PropReason      = "tflo-reason"
	PropSourceTopic = "tflo-source-topic"
	PropPacketID    = "tflo-packet-id"
)

func (s *Source) deadLetter(ctx context.Context, cli *paho.Client, p *paho.Publish, cause error) error {
	if err := s.sendDeadLetter(ctx, cli, p, cause); err != nil {
		s.ctr.inc(CounterDeadLetterFailed)
		return err
	}
	s.ctr.inc(CounterDeadLettered)
	if ok, skipped := s.dlqLog.Allow(); ok {
		s.cfg.logger.Warn("mqtt payload dead-lettered", lograte.With(skipped, "client_id", s.cfg.clientID, "topic", p.Topic, "packet_id", p.PacketID, "reason", cause)...)
	}
	return nil
}

// sendDeadLetter hands the dead letter to WithDeadLetters' function, or
// publishes it to the dead-letter topic on the source's connection.
func (s *Source) sendDeadLetter(ctx context.Context, cli *paho.Client, p *paho.Publish, cause error) error {
	d := DeadLetter{Topic: p.Topic, PacketID: p.PacketID, Payload: p.Payload, Cause: cause}
	if p.Properties != nil {
		d.Props = p.Properties.User
	}
	ctx = context.WithValue(ctx, deliveringConn{}, cli)
	var err error
	if f := s.cfg.deadLetters; f != nil {
		err = f(ctx, d)
	} else {
		err = s.publishDeadLetter(ctx, s.cfg.deadLetterTopic, d)
	}
	if err == nil {
		return nil
	}
	if errors.Is(err, ErrConnectionLost) || connectionGone(ctx, cli, err) {
		// Leave the message unacknowledged: the broker redelivers it
		// after the reconnect and it is dead-lettered then.
		s.cfg.logger.Warn("mqtt dead letter lost with the connection", "client_id", s.cfg.clientID, "topic", p.Topic, "packet_id", p.PacketID, "err", err)
		if ctx.Err() == nil {
			dropConnection(cli)
		}
		return errNoAck
	}
	return fmt.Errorf("mqtt source %q: dead letter (from topic %q, packet %d): %w", s.cfg.clientID, p.Topic, p.PacketID, err)
}

// publishDeadLetter publishes d to topic on the source's connection (QoS
// 1, waiting for the broker's PUBACK): its payload, its own user
// properties but forged tflo-* ones, and properties naming the reason,
// the source topic and the packet id.
func (s *Source) publishDeadLetter(ctx context.Context, topic string, d DeadLetter) error {
	cm := s.conn.Load()
	if cm == nil && s.running.Load() {
		// Run has started: its connection may have delivered the message
		// before Run's goroutine stored it.
		if testHookWaitConn != nil {
			testHookWaitConn()
		}
		select {
		case <-s.connSet:
			cm = s.conn.Load()
		case <-ctx.Done():
			return fmt.Errorf("publish to %q: %w", topic, ctx.Err())
		}
	}
	if cm == nil {
		return fmt.Errorf("publish to %q: the source is not running", topic)
	}
	props := &paho.PublishProperties{User: make(paho.UserProperties, 0, len(d.Props)+3)}
	for _, u := range d.Props {
		if u.Key != PropReason && u.Key != PropSourceTopic && u.Key != PropPacketID {
			props.User = append(props.User, u)
		}
	}
	props.User.Add(PropReason, d.Cause.Error())
	props.User.Add(PropSourceTopic, d.Topic)
	props.User.Add(PropPacketID, strconv.Itoa(int(d.PacketID)))
	pub := &paho.Publish{Topic: topic, QoS: 1, Payload: d.Payload, Properties: props}
	publish := func() error {
		_, err := cm.Publish(ctx, pub)
		return err
	}
	var err error
	if testHookFirstPublish != nil {
		err = testHookFirstPublish(publish)
	} else {
		err = publish()
	}
	if errors.Is(err, autopaho.ConnectionDownError) && deliveredOnLiveConn(ctx) {
		// The message came on a connection autopaho has not marked up
		// yet: a session's redelivery arrives with the CONNACK, before
		// autopaho stores the new connection. It does so without waiting
		// for this handler, so wait for it (bounded) and publish again.
		wctx, cancel := context.WithTimeout(ctx, s.cfg.connectTimeout)
		if cm.AwaitConnection(wctx) == nil {
			err = publish()
		}
		cancel()
	}
	switch {
	case err == nil:
		return nil
	case lostConnection(err):
		err = fmt.Errorf("%w: %w", ErrConnectionLost, err)
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		// No PUBACK within the packet timeout. When the connection
		// closes while the publish waits, the client cannot tell it: it
		// keeps the PUBLISH for the session and waits for its goroutine
		// that delivers messages, which is this one, to return.
		err = fmt.Errorf("%w: no PUBACK within %s: %w", ErrConnectionLost, s.cfg.connectTimeout, err)
	}
	return fmt.Errorf("publish to %q: %w", topic, err)
}

// lostConnection reports whether a publish failed because the connection
// went away: paho's "connection lost", its session's "no connection
// available" (the connection closed while the PUBLISH was being sent),
// or autopaho's "connection down".
func lostConnection(err error) bool {
	return errors.Is(err, paho.ErrConnectionLost) || errors.Is(err, session.ErrNoConnection) || errors.Is(err, autopaho.ConnectionDownError)
}

// deliveringConn is the context key of the connection that delivered the
// message being dead-lettered (sendDeadLetter sets it; a WithDeadLetters
// function passes its context on to DeadLetterSink.Write).
type deliveringConn struct{}

// deliveredOnLiveConn reports whether ctx names the connection that
// delivered the message and that connection is still open.
func deliveredOnLiveConn(ctx context.Context) bool {
	cli, _ := ctx.Value(deliveringConn{}).(*paho.Client)
	if cli == nil {
		return false
	}
	select {
	case <-cli.Done():
		return false
	default:
		return true
	}
}

// dropConnection closes cli's network connection, unless cli has closed
// already. A dead letter whose PUBACK did not come in time on a
// connection that is still up (a slow broker) leaves its message
// unacknowledged there, and acknowledgements go out in receive order:
// every later message's would wait behind it until the broker's
// in-flight window filled and the stream stopped. The connection is lost
// as if the network dropped it (paho's Disconnect would not tell autopaho
// to reconnect), and the broker redelivers the message on the next one.
func dropConnection(cli *paho.Client) {
	select {
	case <-cli.Done():
	default:
		cli.TerminateConnectionForTest()
	}
}

// errNoAck: the message was not handled because the connection went
// away; do not acknowledge it and keep running.
var errNoAck = errors.New("not acknowledged")

func connectionGone(ctx context.Context, cli *paho.Client, err error) bool {
	if ctx.Err() != nil || lostConnection(err) {
		return true
	}
	select {
	case <-cli.Done():
		return true
	default:
		return false
	}
}
