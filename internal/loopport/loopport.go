// Package loopport picks loopback TCP ports for servers tflo starts as
// child processes (the Temporal dev server, influxd, versitygw,
// mosquitto), which must be told their port before they bind it.
//
// A port found free by binding 127.0.0.1:0 and closing the listener comes
// from the kernel's ephemeral range, the range every outgoing connection
// also takes its local port from: under `go test ./...` (many servers and
// clients at once) one of them can take the port before the child binds
// it, and the child exits with "address already in use". Pick therefore
// chooses below that range, where no connection is given a port, and
// checks that the port is free; a collision is then left only between two
// picks at the same moment, which callers handle by starting again on a
// new port (Retry).
package loopport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the first port Pick considers (above the well-known and most
// registered service ports).
const lowest = 20000

// Pick returns a free loopback address 127.0.0.1:P with P below the
// kernel's ephemeral port range.
func Pick() (string, error) {
	hi := ephemeralStart() - 1
	var last error
	for range 64 {
		p := lowest + rand.IntN(hi-lowest+1)
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p))
		l, err := net.Listen("tcp", addr)
		if err != nil {
			last = err
			continue
		}
		_ = l.Close()
		return addr, nil
	}
	return "", fmt.Errorf("loopport: no free loopback port in %d-%d after 64 tries: %w", lowest, hi, last)
}

// PickPort is Pick's port number.
func PickPort() (int, error) {
	addr, err := Pick()
	if err != nil {
		return 0, err
	}
	_, p, _ := net.SplitHostPort(addr)
	return strconv.Atoi(p)
}

// attempts is how many times Retry starts a server.
const attempts = 4

// Retry calls start, which picks the server's ports and starts it, until
// it succeeds, fails for another reason than a taken port, or has been
// called four times; it returns start's last result. taken tells a taken
// port from other failures (nil: InUse of the error's text).
func Retry[T any](start func() (T, error), taken func(error) bool) (T, error) {
	if taken == nil {
		taken = func(err error) bool { return InUse(err.Error()) }
	}
	for attempt := 1; ; attempt++ {
		v, err := start()
		if err == nil || attempt == attempts || !taken(err) {
			return v, err
		}
	}
}

// InUse reports whether a server's failure (its error or the tail of its
// log) says a port it was given was taken.
func InUse(text string) bool {
	return strings.Contains(strings.ToLower(text), "address already in use")
}

// ephemeralStart is the first port of the kernel's ephemeral range
// (Linux: net.ipv4.ip_local_port_range; 32768 when it cannot be read or
// leaves too little room below it).
func ephemeralStart() int {
	const fallback = 32768
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return fallback
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return fallback
	}
	lo, err := strconv.Atoi(f[0])
	if err != nil || lo < lowest+1024 {
		return fallback
	}
	return lo
}
