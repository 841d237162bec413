package simulator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/eclipse/paho.golang/autopaho"
	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho"
	"github.com/eclipse/paho.golang/paho/session"
)

// MQTTPublisher publishes readings with QoS 2 over an autopaho connection
// (reconnects with backoff).
type MQTTPublisher struct {
	cm     *autopaho.ConnectionManager
	cancel context.CancelFunc
	host   string
	log    *slog.Logger
	up     atomic.Bool // a connection to the broker is up now
	closed atomic.Bool // Close was called: publishes fail with ErrStopped
	// lost closes when the connection up (or the next one to come up)
	// goes down, and is replaced by a new one then: a publish waiting for
	// its PUBCOMP on a connection gone waits for nothing (paho drops a
	// session without expiry with the connection, answering no one).
	mu   sync.Mutex
	lost chan struct{}
}

// defaultClientID is the MQTT client id of a simulator that names none.
const defaultClientID = "tflo-simulator"

// MQTTOptions configure DialMQTT.
type MQTTOptions struct {
	URL      string // mqtt://host:port
	ClientID string // default "tflo-simulator"
	Username string
	Password string // never logged
	// Log receives a line for each failed connection attempt (default
	// discard).
	Log *slog.Logger
}

// DialMQTT connects and waits (until ctx ends) for the first connection,
// logging each failed attempt; a broker refusing the user fails it at
// once.
func DialMQTT(ctx context.Context, o MQTTOptions) (*MQTTPublisher, error) {
	u, err := parseBrokerURL(o.URL)
	if err != nil {
		return nil, fmt.Errorf("simulator: %w", err)
	}
	if o.ClientID == "" {
		o.ClientID = defaultClientID
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	// A refusal of the user ends the wait for the first connection with
	// its error; after it, it is logged like any failed attempt.
	wctx, refused := context.WithCancelCause(ctx)
	defer refused(nil)
	var connected atomic.Bool
	p := &MQTTPublisher{host: u.Host, log: o.Log, lost: make(chan struct{})}
	runCtx, cancel := context.WithCancel(context.Background())
	cm, err := autopaho.NewConnection(runCtx, autopaho.ClientConfig{
		ServerUrls:                    []*url.URL{u},
		KeepAlive:                     20,
		CleanStartOnInitialConnection: true,
		ConnectUsername:               o.Username,
		ConnectPassword:               []byte(o.Password),
		ConnectTimeout:                5 * time.Second,
		// As the worker's MQTT source: autopaho's default grows to ten
		// minutes, so a fleet would stay away that long after an outage.
		ReconnectBackoff: autopaho.NewExponentialBackoff(100*time.Millisecond, 10*time.Second, 200*time.Millisecond, 2),
		OnConnectionUp:   func(*autopaho.ConnectionManager, *paho.Connack) { p.up.Store(true) },
		OnConnectionDown: func() bool {
			p.up.Store(false)
			p.mu.Lock()
			close(p.lost)
			p.lost = make(chan struct{})
			p.mu.Unlock()
			return true
		},
		OnConnectError: func(err error) {
			var ce *autopaho.ConnackError
			if !connected.Load() && errors.As(err, &ce) && (ce.ReasonCode == packets.ConnackBadUsernameOrPassword || ce.ReasonCode == packets.ConnackNotAuthorized) {
				refused(fmt.Errorf("broker %s refused user %q: %w", u.Host, o.Username, err))
				return
			}
			o.Log.Warn("mqtt connect failed; retrying with backoff", "broker", u.Host, "err", err)
		},
		ClientConfig: paho.ClientConfig{ClientID: o.ClientID},
	})
	if err != nil {
		cancel()
		return nil, fmt.Errorf("simulator: connect to %s: %w", u.Host, err)
	}
	if err := cm.AwaitConnection(wctx); err != nil {
		cancel()
		if cause := context.Cause(wctx); ctx.Err() == nil && cause != nil {
			return nil, fmt.Errorf("simulator: %w", cause)
		}
		return nil, fmt.Errorf("simulator: connect to %s: %w", u.Host, err)
	}
	connected.Store(true)
	p.cm, p.cancel = cm, cancel
	return p, nil
}

// Connected reports nil while a connection to the broker is up, else an
// error naming the broker (it is reconnecting).
func (p *MQTTPublisher) Connected() error {
	if !p.up.Load() {
		return fmt.Errorf("simulator: not connected to broker %s", p.host)
	}
	return nil
}

// parseBrokerURL parses a broker URL, refusing one autopaho cannot dial:
// it would retry such a URL for ever (an unknown scheme), or take its
// host for a scheme ("mosquitto:1883"); and one with user info.
func parseBrokerURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err == nil && u.User != nil {
		// autopaho takes no login from the URL: it would be ignored (a
		// broker requiring one refuses user ""), and the password logged
		// ("simulator running") and shown by /readyz with the URL. As the
		// worker's MQTT source refuses it.
		return nil, fmt.Errorf("broker URL %s carries user info, which is not used: set mqtt.username and mqtt.password_env", u.Redacted())
	}
	if err != nil || u.Host == "" {
		return nil, fmt.Errorf("broker URL %q: want mqtt://host:port", s)
	}
	switch strings.ToLower(u.Scheme) {
	case "mqtt", "tcp", "ssl", "tls", "mqtts", "mqtt+ssl", "tcps", "ws", "wss": // what autopaho dials
	default:
		return nil, fmt.Errorf("broker URL %q: scheme %q is not mqtt, tcp, ssl, tls, mqtts, mqtt+ssl, tcps, ws or wss; want mqtt://host:port", s, u.Scheme)
	}
	return u, nil
}

// publishGrace is how long a publish under way when its context ends
// may still take to complete.
const publishGrace = 2 * time.Second

// Publish sends payload to topic with QoS 2 and waits for PUBCOMP. A
// context that has ended sends nothing; one that ends while the publish
// is under way lets it complete (for up to publishGrace), so the payload
// counted is delivered, and Close does not disconnect in the middle of
// the QoS 2 exchange (paho.golang v0.23 races with itself then: its
// session state sends PUBREL on the connection being torn down, eclipse-
// paho/paho.golang#343). A publish the connection's loss interrupts (or
// that finds it down) waits for the reconnect and is sent again, so a
// broker restart pauses the fleet instead of ending its run; the broker
// may have received the first copy, so that payload may arrive twice. A
// broker refusing the publish (a reason code of 0x80 or more: its ACL
// denies the topic, a quota) is an error naming it, the topic and the
// reason code. A broker may instead drop the connection at a publish it
// will not take (one larger than its maximum packet size): a publish
// whose connection was lost maxDrops times in a row is an error naming
// the broker, the topic and the size. After Close it fails with an error
// wrapping ErrStopped.
func (p *MQTTPublisher) Publish(ctx context.Context, topic string, payload []byte) error {
	drops := 0
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		if p.closed.Load() {
			return p.stopped(topic)
		}
		p.mu.Lock()
		lost := p.lost
		p.mu.Unlock()
		err := p.publishOnce(ctx, lost, topic, payload)
		if err == nil || ctx.Err() != nil {
			return err
		}
		down := errors.Is(err, autopaho.ConnectionDownError) // none up: connUp is reset already
		if !down && !errors.Is(err, paho.ErrConnectionLost) && !errors.Is(err, session.ErrNoConnection) {
			select {
			case <-lost:
			default:
				return err // the connection is up: not its loss
			}
		}
		if !down {
			// The connection was lost while the publish was under way:
			// a broker restart, or the broker dropping it for this
			// publish, again at each attempt.
			if drops++; drops == maxDrops {
				return fmt.Errorf("broker %s dropped the connection at each of %d publishes of %d bytes to %q: it does not take them (larger than its maximum packet size? its log says why)", p.host, drops, len(payload), topic)
			}
			// Wait for autopaho to see the loss, so AwaitConnection
			// waits for the next connection, not the one gone.
			select {
			case <-lost:
			case <-ctx.Done():
				return ctx.Err()
			case <-p.cm.Done():
				return err
			}
		}
		p.log.Warn("mqtt connection lost; publishing again once reconnected", "broker", p.host, "topic", topic, "err", err)
		if werr := p.cm.AwaitConnection(ctx); werr != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if p.closed.Load() {
				return p.stopped(topic)
			}
			return err
		}
	}
}

// maxDrops is how many times in a row the connection may be lost during
// one publish before Publish gives up on it.
const maxDrops = 3

// stopped is Publish's error after Close.
func (p *MQTTPublisher) stopped(topic string) error {
	return fmt.Errorf("publish to %q on broker %s: %w", topic, p.host, ErrStopped)
}

// publishOnce is one attempt of Publish, on the connection whose loss
// closes lost.
func (p *MQTTPublisher) publishOnce(ctx context.Context, lost <-chan struct{}, topic string, payload []byte) error {
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	stop := context.AfterFunc(ctx, func() { time.AfterFunc(publishGrace, cancel) })
	defer stop()
	go func() {
		select {
		case <-lost:
			cancel()
		case <-pctx.Done():
		}
	}()
	pr, err := p.cm.Publish(pctx, &paho.Publish{Topic: topic, QoS: 2, Payload: payload})
	if err == nil && pr != nil && pr.ReasonCode >= 0x80 {
		// A refusing PUBREC (or PUBCOMP) comes back with no error from
		// paho: the payload went nowhere and must not be counted.
		err = fmt.Errorf("broker %s refused the publish to %q: reason code 0x%02x", p.host, topic, pr.ReasonCode)
		if pr.Properties != nil && pr.Properties.ReasonString != "" {
			err = fmt.Errorf("%w (%s)", err, pr.Properties.ReasonString)
		}
	}
	return err
}

// Close disconnects; later publishes fail with ErrStopped.
func (p *MQTTPublisher) Close(ctx context.Context) error {
	p.closed.Store(true)
	p.up.Store(false) // autopaho calls no OnConnectionDown for a Disconnect
	err := p.cm.Disconnect(ctx)
	p.cancel()
	return err
}
