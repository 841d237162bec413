package mqttbroker

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"

	mochi "github.com/mochi-mqtt/server/v2"
	"github.com/mochi-mqtt/server/v2/hooks/auth"
	"github.com/mochi-mqtt/server/v2/system"
)

// Broker is a running broker.
type Broker struct {
	srv *mochi.Server
	tcp *Listener

	mu        sync.Mutex
	addr      string // empty until the listener is open
	listening bool
	once      sync.Once
}

// Options configure Start.
type Options struct {
	// Addr to listen on (default 127.0.0.1:0, a free loopback port).
	Addr string
	// Users, when set, are the only accepted username/password pairs.
	Users map[string]string
	// Ledger, when set, is the auth hook's ledger in place of Users
	// (which must then be nil): for ACL rules, such as one denying a
	// topic.
	Ledger *auth.Ledger
	// TLS, when set, has the listener serve TLS (clients dial
	// tls://Addr()).
	TLS *tls.Config
	// Capabilities (default mochi's), such as a maximum packet size.
	Capabilities *mochi.Capabilities
	// Hooks are added after the auth hook and before the server starts,
	// in order: a storage hook that restores sessions, or a test's own.
	Hooks []mochi.HookLoadConfig
	// DeferListen starts the broker without its listener, so it accepts
	// no connection (and Addr is empty) until Listen: to queue messages
	// for an offline session.
	DeferListen bool
	// Logger (default: discard).
	Logger *slog.Logger
}

// Start starts a broker.
func Start(o Options) (*Broker, error) {
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.Users != nil && o.Ledger != nil {
		return nil, errors.New("mqtt broker: both Users and Ledger are set; give one")
	}
	srv := mochi.New(&mochi.Options{InlineClient: true, Logger: o.Logger, Capabilities: o.Capabilities})
	var err error
	switch {
	case o.Ledger != nil:
		err = srv.AddHook(new(auth.Hook), &auth.Options{Ledger: o.Ledger})
	case o.Users != nil:
		var rules auth.AuthRules
		for u, p := range o.Users {
			rules = append(rules, auth.AuthRule{Username: auth.RString(u), Password: auth.RString(p), Allow: true})
		}
		err = srv.AddHook(new(auth.Hook), &auth.Options{Ledger: &auth.Ledger{Auth: rules, ACL: auth.ACLRules{{}}}})
	default:
		err = srv.AddHook(new(auth.AllowHook), nil)
	}
	if err != nil {
		return nil, fmt.Errorf("mqtt broker: auth hook: %w", err)
	}
	if err := srv.AddHooksFromConfig(o.Hooks); err != nil {
		return nil, fmt.Errorf("mqtt broker: hooks: %w", err)
	}
	b := &Broker{srv: srv, tcp: NewListener("tcp", o.Addr, o.TLS)}
	if !o.DeferListen {
		if err := b.addListener(); err != nil {
			return nil, err
		}
	}
	if err := srv.Serve(); err != nil {
		return nil, fmt.Errorf("mqtt broker: serve: %w", err)
	}
	return b, nil
}

// addListener opens the broker's listener; the caller serves it.
func (b *Broker) addListener() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.listening {
		return fmt.Errorf("mqtt broker: already listening on %s", b.addr)
	}
	if err := b.srv.AddListener(b.tcp); err != nil {
		return fmt.Errorf("mqtt broker: listen on %s: %w", b.tcp.Address(), err)
	}
	b.listening = true
	b.addr = b.tcp.Address()
	return nil
}

// Listen opens the listener of a broker started with DeferListen and
// accepts connections from then on.
func (b *Broker) Listen() error {
	if err := b.addListener(); err != nil {
		return err
	}
	b.srv.Listeners.Serve(b.tcp.ID(), b.srv.EstablishConnection)
	return nil
}

// Addr is the host:port clients connect to (empty before Listen when
// started with DeferListen).
func (b *Broker) Addr() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addr
}

// URL is the broker's mqtt:// URL.
func (b *Broker) URL() string { return "mqtt://" + b.Addr() }

// Server is the mochi server itself, for what a test does as the broker:
// publish or subscribe inline, add a hook, find or disconnect a client.
func (b *Broker) Server() *mochi.Server { return b.srv }

// Info is a copy of the broker's counters (messages received, sent and
// dropped, clients connected, …): what a test prints when a message did
// not arrive.
func (b *Broker) Info() *system.Info { return b.srv.Info.Clone() }

// Close stops the broker.
func (b *Broker) Close() error {
	var err error
	b.once.Do(func() { err = b.srv.Close() })
	return err
}
