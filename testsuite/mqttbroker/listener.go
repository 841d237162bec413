package mqttbroker

import (
	"crypto/tls"
	"log/slog"
	"net"
	"sync"

	"github.com/mochi-mqtt/server/v2/listeners"
)

// Listener is a TCP listener for a mochi server (in place of
// listeners.NewTCP) whose Close also closes every connection it accepted
// and waits until the server is done with each. mochi's own TCP listener
// leaves a connection accepted just before the server's Close to attach
// while Close waits for the clients (a WaitGroup Add racing its Wait,
// which the race detector reports): a client that redials as the broker
// stops — one of two clients taking the same client id from each other —
// is enough.
type Listener struct {
	id, addr string
	tls      *tls.Config
	ln       net.Listener

	mu     sync.Mutex
	closed bool
	conns  map[net.Conn]struct{}
	served sync.WaitGroup // the accept loop and every connection's establish
}

// NewListener returns a listener of id on addr (host:port; port 0 picks
// a free one), serving TLS with tlsConfig when it is not nil.
func NewListener(id, addr string, tlsConfig *tls.Config) *Listener {
	return &Listener{id: id, addr: addr, tls: tlsConfig, conns: map[net.Conn]struct{}{}}
}

// Init opens the address.
func (l *Listener) Init(*slog.Logger) error {
	ln, err := net.Listen("tcp", l.addr)
	if err != nil {
		return err
	}
	if l.tls != nil {
		ln = tls.NewListener(ln, l.tls)
	}
	l.ln = ln
	return nil
}

// Serve accepts connections and hands each to establish, until Close.
func (l *Listener) Serve(establish listeners.EstablishFn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.served.Add(1)
	l.mu.Unlock()
	defer l.served.Done()
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		if l.closed {
			l.mu.Unlock()
			_ = c.Close()
			return
		}
		l.conns[c] = struct{}{}
		l.served.Add(1)
		l.mu.Unlock()
		go func() {
			defer l.served.Done()
			_ = establish(l.id, c)
			l.mu.Lock()
			delete(l.conns, c)
			l.mu.Unlock()
			_ = c.Close()
		}()
	}
}

// ID is the listener's id.
func (l *Listener) ID() string { return l.id }

// Address is the host:port it listens on (after Init).
func (l *Listener) Address() string {
	if l.ln != nil {
		return l.ln.Addr().String()
	}
	return l.addr
}

// Protocol is "tcp".
func (l *Listener) Protocol() string { return "tcp" }

// Close stops accepting, disconnects the listener's clients
// (closeClients), closes every connection it accepted, and returns once
// the server is done with all of them.
func (l *Listener) Close(closeClients listeners.CloseFn) {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return
	}
	l.closed = true
	if l.ln != nil {
		_ = l.ln.Close()
	}
	l.mu.Unlock()
	closeClients(l.id)
	l.mu.Lock()
	for c := range l.conns {
		_ = c.Close()
	}
	l.mu.Unlock()
	l.served.Wait()
}
