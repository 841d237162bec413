package mqtt

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/eclipse/paho.golang/paho"

	"github.com/tflo-io/tflo/streaming"
)

// Option configures a Source.
type Option func(*config)

type config struct {
	servers         []*url.URL
	clientID        string
	filters         []string
	shareGroup      string
	qos             byte
	cleanStart      bool
	sessionExpiry   time.Duration
	keepAlive       time.Duration
	connectTimeout  time.Duration
	backoffMin      time.Duration
	backoffMax      time.Duration
	receiveMaximum  uint16
	ackInterval     time.Duration
	username        string
	password        []byte
	tls             *tls.Config
	deadLetterTopic string
	deadLetters     DeadLetterFunc
	decoder         TopicDecoder
	windowCap       int
	retainedCap     int
	cursor          []byte
	logger          *slog.Logger
	counters        CounterHook
	credErr         error
	ackOnCheckpoint bool
	limits          streaming.Limits
	check           *streaming.LimitCheck // compiled by validate
	topicMatch      bool
	maxPacketSize   uint32
}

func defaultConfig() config {
	return config{
		qos:             2,
		sessionExpiry:   time.Hour,
		keepAlive:       30 * time.Second,
		connectTimeout:  10 * time.Second,
		backoffMin:      100 * time.Millisecond,
		backoffMax:      10 * time.Second,
		receiveMaximum:  256,
		ackInterval:     5 * time.Millisecond,
		deadLetterTopic: "tflo/deadletter",
		decoder:         func(_ string, p []byte) (Reading, error) { return DecodeReading(p) },
		windowCap:       4096,
		retainedCap:     4096,
		topicMatch:      true,
		maxPacketSize:   DefaultMaxPacketSize,
		logger:          slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

func (c *config) validate() error {
	var errs []error
	if c.credErr != nil {
		errs = append(errs, c.credErr)
	}
	if len(c.servers) == 0 {
		errs = append(errs, errors.New("no broker: set WithServers"))
	}
	if c.clientID == "" {
		errs = append(errs, errors.New("no client id: a persistent session needs a stable one, set WithClientID"))
	}
	if len(c.filters) == 0 {
		errs = append(errs, errors.New("no topic filters: set WithTopics"))
	}
	for _, f := range c.filters {
		if strings.HasPrefix(f, "$share/") {
			errs = append(errs, fmt.Errorf("topic filter %q: give the plain filter and set WithSharedGroup instead", f))
		}
	}
	if strings.ContainsAny(c.shareGroup, "/+#") {
		errs = append(errs, fmt.Errorf("shared group %q must not contain '/', '+' or '#'", c.shareGroup))
	}
	if c.qos > 2 {
		errs = append(errs, fmt.Errorf("qos %d: want 0, 1 or 2", c.qos))
	}
	if c.sessionExpiry < 0 || c.sessionExpiry > time.Duration(1<<32-1)*time.Second || (c.sessionExpiry > 0 && c.sessionExpiry < time.Second) {
		// CONNECT carries it in whole seconds: under 1s would be 0, a
		// session that ends with the connection.
		errs = append(errs, fmt.Errorf("session expiry %s is out of range: want 1s to 2^32-1 seconds (0 ends the session with the connection)", c.sessionExpiry))
	}
	if c.keepAlive != 0 && (c.keepAlive < time.Second || c.keepAlive > (1<<16-1)*time.Second) {
		// CONNECT carries it in whole seconds, 16 bits: 0 turns it off.
		errs = append(errs, fmt.Errorf("keep-alive %s is out of range: want 1s to 65535s (0 turns it off)", c.keepAlive))
	}
	if c.connectTimeout <= 0 {
		errs = append(errs, fmt.Errorf("connect timeout %s must be positive", c.connectTimeout))
	}
	if c.backoffMin <= 0 || c.backoffMax <= c.backoffMin {
		errs = append(errs, fmt.Errorf("reconnect backoff %s..%s: want 0 < min < max", c.backoffMin, c.backoffMax))
	}
	if c.ackInterval <= 0 {
		errs = append(errs, fmt.Errorf("ack interval %s must be positive", c.ackInterval))
	}
	if c.deadLetters == nil { // else the dead letters do not go to the topic
		errs = append(errs, c.validDeadLetterTopic(c.deadLetterTopic)...)
	}
	if c.windowCap <= 0 || c.retainedCap <= 0 || c.windowCap > streaming.MaxMQTTWindow || c.retainedCap > streaming.MaxMQTTRetained {
		errs = append(errs, fmt.Errorf("dedup window %d and retained map %d capacities must be in 1..%d and 1..%d",
			c.windowCap, c.retainedCap, streaming.MaxMQTTWindow, streaming.MaxMQTTRetained))
	}
	if c.receiveMaximum > 0 && int(c.receiveMaximum) > c.windowCap {
		errs = append(errs, fmt.Errorf("receive maximum %d exceeds the dedup window %d: a full in-flight burst could push a redelivered id out of the window", c.receiveMaximum, c.windowCap))
	}
	if c.decoder == nil {
		errs = append(errs, errors.New("nil decoder"))
	}
	check, err := c.limits.Compile()
	if err != nil {
		errs = append(errs, err)
	}
	c.check = check
	return errors.Join(errs...)
}

// CheckServerURL returns the error WithServers (and so NewSource) gives
// for a broker URL the source cannot use; nil for a good one. A pipeline
// spec's check refuses such a URL before the worker starts.
func CheckServerURL(s string) error {
	_, err := parseServer(s)
	return err
}

// parseServer parses a broker URL the way autopaho dials it.
func parseServer(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("server URL: %v", redactURLError(err))
	}
	if u.User != nil {
		return nil, fmt.Errorf("server URL %s carries user info: use WithCredentials", u.Redacted())
	}
	// A URL autopaho cannot dial would be retried for ever, each attempt
	// logging "unsupported scheme" or a failed dial: "host:port" parses
	// as scheme "host".
	if u.Host == "" {
		return nil, fmt.Errorf("server URL %q: want mqtt://host:port", u.Redacted())
	}
	switch strings.ToLower(u.Scheme) {
	case "mqtt", "tcp", "", "ssl", "tls", "mqtts", "mqtt+ssl", "tcps", "ws", "wss": // what autopaho dials
	default:
		return nil, fmt.Errorf("server URL %q: scheme %q is not mqtt, tcp, ssl, tls, mqtts, mqtt+ssl, tcps, ws or wss; want mqtt://host:port", u.Redacted(), u.Scheme)
	}
	return u, nil
}

// WithServers sets the broker URLs, tried in order on each (re)connect:
// mqtt://host:port or tls://host:port. User info in a URL is refused;
// use WithCredentials, and so is a URL without a host or with a scheme
// the client does not dial. Required.
func WithServers(urls ...string) Option {
	return func(c *config) {
		for _, s := range urls {
			u, err := parseServer(s)
			if err != nil {
				c.credErr = errors.Join(c.credErr, err)
				continue
			}
			c.servers = append(c.servers, u)
		}
	}
}

// WithClientID sets the MQTT client id. The persistent session is keyed by
// it, so it must be stable across restarts and unique per gateway.
// Required.
func WithClientID(id string) Option { return func(c *config) { c.clientID = id } }

// WithTopics sets the topic filters to subscribe to. Required.
func WithTopics(filters ...string) Option {
	return func(c *config) { c.filters = append(c.filters, filters...) }
}

// WithSharedGroup subscribes through the shared subscription
// $share/<group>/<filter>, so several gateways split one stream. Default:
// none (every subscriber gets every message).
func WithSharedGroup(group string) Option { return func(c *config) { c.shareGroup = group } }

// WithQoS sets the subscription QoS. Default 2 (exactly once between
// broker and client; the dedup cursor makes redeliveries after a
// reconnect harmless).
func WithQoS(q byte) Option { return func(c *config) { c.qos = q } }

// WithCleanStart sets Clean Start on the first connection. Default false:
// resume the persistent session (subscriptions and queued QoS 1/2
// messages survive a reconnect or a restart of the gateway).
func WithCleanStart(v bool) Option { return func(c *config) { c.cleanStart = v } }

// WithSessionExpiry sets how long the broker keeps the session after a
// disconnect, in whole seconds from 1s to 2^32-1 seconds (MQTT's range).
// Default one hour. Zero ends the session with the connection.
func WithSessionExpiry(d time.Duration) Option { return func(c *config) { c.sessionExpiry = d } }

// WithKeepAlive sets the keep-alive interval, in whole seconds from 1s
// to 65535s (MQTT's range); 0 turns it off. Default 30s.
func WithKeepAlive(d time.Duration) Option { return func(c *config) { c.keepAlive = d } }

// WithConnectTimeout bounds one connection attempt, and the wait for the
// broker's answer to a packet on a connection (a SUBACK, a dead letter's
// PUBACK). Default 10s.
func WithConnectTimeout(d time.Duration) Option { return func(c *config) { c.connectTimeout = d } }

// WithBackoff sets the reconnect backoff: exponential with jitter from min
// up to max. Default 100ms to 10s.
func WithBackoff(min, max time.Duration) Option {
	return func(c *config) { c.backoffMin, c.backoffMax = min, max }
}

// WithReceiveMaximum caps the QoS 1/2 messages the broker may have in
// flight to this client (MQTT v5 Receive Maximum): the back-pressure bound
// between the broker and a slow handler. Default 256. Zero omits the
// property, so the protocol default (65535) applies: a workaround for
// brokers whose flow control misbehaves (mochi v2.7.9 can deadlock in it),
// at the price of a larger in-flight bound.
func WithReceiveMaximum(n uint16) Option { return func(c *config) { c.receiveMaximum = n } }

// WithAckInterval sets how often handled messages are acknowledged (acks
// are sent in receive order, only after the handler returned nil).
// Default 5ms.
func WithAckInterval(d time.Duration) Option { return func(c *config) { c.ackInterval = d } }

// WithCredentials sets the user name and password. The password is kept
// only in the CONNECT packet and is never logged or put in an error.
// Default: anonymous.
func WithCredentials(username string, password []byte) Option {
	return func(c *config) { c.username, c.password = username, password }
}

// WithCredentialsFromEnv reads the user name and password from the named
// environment variables; a missing variable is a construction error that
// names the variable, not its value.
func WithCredentialsFromEnv(userVar, passwordVar string) Option {
	return func(c *config) {
		u, okU := os.LookupEnv(userVar)
		p, okP := os.LookupEnv(passwordVar)
		if !okU || !okP {
			c.credErr = errors.Join(c.credErr, fmt.Errorf("credentials: environment variables %s and %s must both be set", userVar, passwordVar))
			return
		}
		c.username, c.password = u, []byte(p)
	}
}

// WithTLS sets the TLS configuration used for tls:// servers (custom root
// CAs, client certificates). The workers build it from PEM files with
// internal/tlsconfig. Default: none (a tls:// URL then uses the system
// roots).
func WithTLS(cfg *tls.Config) Option { return func(c *config) { c.tls = cfg } }

// WithDeadLetterTopic sets the topic malformed payloads are published to
// (QoS 1, with user properties naming the reason, source topic and packet
// id). Default "tflo/deadletter".
func WithDeadLetterTopic(topic string) Option { return func(c *config) { c.deadLetterTopic = topic } }

// validDeadLetterTopic checks a topic dead letters are published to.
func (c *config) validDeadLetterTopic(topic string) []error {
	var errs []error
	if topic == "" || strings.ContainsAny(topic, "+#") {
		errs = append(errs, fmt.Errorf("dead-letter topic %q must be a non-empty topic name without wildcards", topic))
	}
	for _, f := range c.filters {
		if TopicMatches(f, topic) {
			errs = append(errs, fmt.Errorf("dead-letter topic %q matches topic filter %q: the source would read its own dead letters", topic, f))
		}
	}
	return errs
}

// DeadLetter is one of the source's dead letters: a message it could not
// process, as it came, and why.
type DeadLetter struct {
	Topic    string
	PacketID uint16 // 0 for QoS 0
	Payload  []byte // valid during the DeadLetterFunc call only
	Props    []paho.UserProperty
	Cause    error
}

// DeadLetterFunc takes one of the source's dead letters. The message is
// acknowledged after it returns nil (or, with WithAckOnCheckpoint, at the
// next checkpoint), so what it writes must be durable by then. An error
// wrapping ErrConnectionLost (a DeadLetterSink's publish lost with the
// connection), or any error once the message's connection is gone,
// leaves the message unacknowledged for the broker to redeliver; another
// error also stops Run.
type DeadLetterFunc func(ctx context.Context, d DeadLetter) error

// WithDeadLetters hands the dead letters to f instead of publishing them
// to the dead-letter topic (package pipeline writes them to the
// pipeline's dead-letter sink: by default the source's DeadLetterSink).
func WithDeadLetters(f DeadLetterFunc) Option { return func(c *config) { c.deadLetters = f } }

// WithDecoder replaces the payload decoder. Default DecodeReading (JSON).
func WithDecoder(d Decoder) Option {
	return func(c *config) {
		c.decoder = nil // refused by validate, as a nil d
		if d != nil {
			c.decoder = func(_ string, p []byte) (Reading, error) { return d(p) }
		}
	}
}

// WithTopicDecoder replaces the payload decoder with one that is also
// given the message's topic (package pipeline's decoders of your own read
// it as Message.Topic).
func WithTopicDecoder(d TopicDecoder) Option { return func(c *config) { c.decoder = d } }

// WithDedupCapacity bounds the QoS 2 dedup window and the retained-topic
// map of the cursor. Defaults 4096 and 4096.
func WithDedupCapacity(window, retained int) Option {
	return func(c *config) { c.windowCap, c.retainedCap = window, retained }
}

// WithCursor restores the dedup cursor from a checkpoint
// (streaming.MQTTCursor Bytes); its capacities come from the encoding and
// override WithDedupCapacity. Default: a fresh cursor.
func WithCursor(b []byte) Option { return func(c *config) { c.cursor = b } }

// WithAckOnCheckpoint defers every acknowledgement until a checkpoint
// that contains the message is saved (see Source.CutWithAck): a crash then
// loses nothing — the broker redelivers what the restored state lacks, and
// the restored dedup window drops what it has. The broker stops sending
// when WithReceiveMaximum messages await their checkpoint, so size it
// above the messages that arrive in one checkpoint interval. Default off:
// a message is acknowledged as soon as the handler returns.
func WithAckOnCheckpoint() Option { return func(c *config) { c.ackOnCheckpoint = true } }

// DefaultMaxPacketSize is the Maximum Packet Size the source announces
// in CONNECT unless WithMaxPacketSize says otherwise: 64 KiB, far above a
// reading and far below what would hurt.
const DefaultMaxPacketSize = 64 << 10

// WithLimits sets the bounds every decoded reading must keep — key
// pattern and length, value magnitude, ts skew (see streaming.Limits;
// ts is in Unix ms unless Limits.TSUnit says otherwise). A reading
// outside them is dead-lettered with the reason and never reaches the
// handler, the retained-topic sequences or Stats.NewestTS. Default:
// streaming.Limits{} — keys [A-Za-z0-9._:-]{1,128}, |value| <= 1e15, ts
// at most one hour ahead of the clock.
func WithLimits(l streaming.Limits) Option { return func(c *config) { c.limits = l } }

// WithRequireTopicMatch makes the source dead-letter a reading whose
// sensor id is not the last level of the topic it arrived on, so a
// client the broker's ACL allows to publish only on sensors/dev1 cannot
// write another sensor's state. Default: true.
func WithRequireTopicMatch(on bool) Option { return func(c *config) { c.topicMatch = on } }

// WithMaxPacketSize sets the MQTT v5 Maximum Packet Size announced in
// CONNECT: the broker must not send this client a larger packet (it drops
// the message for this subscriber instead), so an oversized payload never
// reaches the decoder. 0 omits the property (no limit). Default
// DefaultMaxPacketSize (64 KiB).
func WithMaxPacketSize(n uint32) Option { return func(c *config) { c.maxPacketSize = n } }

// WithLogger sets the logger. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithCounterHook reports every counter increment (see Counter) to h, for
// Prometheus or another metrics backend. Default: none; Stats always works.
func WithCounterHook(h CounterHook) Option { return func(c *config) { c.counters = h } }

// redactURLError drops the URL (which may hold a password) from a parse error.
func redactURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return fmt.Errorf("%s: %v", ue.Op, ue.Err)
	}
	return err
}

// TopicMatches reports whether topic name matches filter (MQTT wildcards
// '+' for one level, '#' for the rest; '$' topics match no leading
// wildcard), as a broker routes a message published on topic to a
// subscription of filter.
func TopicMatches(filter, topic string) bool {
	if strings.HasPrefix(topic, "$") && (strings.HasPrefix(filter, "+") || strings.HasPrefix(filter, "#")) {
		return false
	}
	fs, ts := strings.Split(filter, "/"), strings.Split(topic, "/")
	for i, f := range fs {
		if f == "#" {
			return true
		}
		if i >= len(ts) || (f != "+" && f != ts[i]) {
			return false
		}
	}
	return len(fs) == len(ts)
}
