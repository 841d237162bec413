package mqttbroker

import (
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
	srv  *mochi.Server
	addr string
	once sync.Once
}

// Options configure Start.
type Options struct {
	// Addr to listen on (default 127.0.0.1:0, a free loopback port).
	Addr string
	// Users, when set, are the only accepted username/password pairs.
	Users map[string]string
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
	srv := mochi.New(&mochi.Options{InlineClient: true, Logger: o.Logger})
	var err error
	if o.Users == nil {
		err = srv.AddHook(new(auth.AllowHook), nil)
	} else {
		var rules auth.AuthRules
		for u, p := range o.Users {
			rules = append(rules, auth.AuthRule{Username: auth.RString(u), Password: auth.RString(p), Allow: true})
		}
		err = srv.AddHook(new(auth.Hook), &auth.Options{Ledger: &auth.Ledger{Auth: rules, ACL: auth.ACLRules{{}}}})
	}
	if err != nil {
		return nil, fmt.Errorf("mqtt broker: auth hook: %w", err)
	}
	tcp := NewListener("tcp", o.Addr, nil)
	if err := srv.AddListener(tcp); err != nil {
		return nil, fmt.Errorf("mqtt broker: listen on %s: %w", o.Addr, err)
	}
	if err := srv.Serve(); err != nil {
		return nil, fmt.Errorf("mqtt broker: serve: %w", err)
	}
	return &Broker{srv: srv, addr: tcp.Address()}, nil
}

// Addr is the host:port clients connect to.
func (b *Broker) Addr() string { return b.addr }

// URL is the broker's mqtt:// URL.
func (b *Broker) URL() string { return "mqtt://" + b.addr }

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
