package faults

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// ErrNetCut is what a dial through a cut Net returns.
var ErrNetCut = errors.New("faults: network cut by the test")

// Net dials TCP and can cut a process off the network as if its machine
// died: Cut closes every connection it dialed and makes new dials fail
// until Heal. Give its Dial to a Kafka client (kgo.Dialer) and its
// GRPCDial to a Temporal client (grpc.WithContextDialer). Safe for
// concurrent use.
type Net struct {
	mu    sync.Mutex
	cut   bool
	conns []net.Conn
}

// Dial dials network/addr unless the network is cut.
func (n *Net) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cut {
		return nil, ErrNetCut
	}
	conn, err := (&net.Dialer{Timeout: time.Second}).DialContext(ctx, network, addr)
	if err == nil {
		n.conns = append(n.conns, conn)
	}
	return conn, err
}

// GRPCDial is Dial over TCP, in the shape grpc.WithContextDialer takes.
func (n *Net) GRPCDial(ctx context.Context, addr string) (net.Conn, error) {
	return n.Dial(ctx, "tcp", addr)
}

// Cut closes every open connection and refuses new dials.
func (n *Net) Cut() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = true
	for _, c := range n.conns {
		_ = c.Close()
	}
	n.conns = nil
}

// Heal lets new dials through again.
func (n *Net) Heal() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.cut = false
}
