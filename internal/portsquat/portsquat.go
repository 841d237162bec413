// Package portsquat lets a test make a server it starts meet a taken
// port: another server takes the port the server under test was picked,
// between the pick and the server's bind. A start that takes the other
// server's answer for its own returns the wrong address; the test fails.
// For tests only (it imports testing).
package portsquat

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// script wraps a server binary: on its first run only, it writes the
// port $PORT_CMD finds in its arguments to the port file and waits for
// the test (go file) before starting the real binary ($REAL_BIN), which
// then cannot bind the port.
const script = `#!/bin/sh
dir=$(dirname "$0")
if [ ! -e "$dir/squatted" ]; then
	: > "$dir/squatted"
	eval "$PORT_CMD" > "$dir/port.tmp" && mv "$dir/port.tmp" "$dir/port"
	while [ ! -e "$dir/go" ]; do sleep 0.01; done
fi
exec "$REAL_BIN" "$@"
`

// Squat installs a wrapper around the binary real and returns its path
// (start the server under test with it) and a channel with the address
// the other server took ("" when it could not take it). portCmd is a
// shell command printing the port the server is given, from the
// wrapper's arguments ("$@", "$2"...). In the background, Squat takes
// that port and hands the listener to serve, which answers as the other
// server and calls reached once a client of the server under test has
// reached it: only then does the real binary start, so that the start
// under test can take the other's answer for its own. The listener is
// closed, and the real binary let go, when the test ends.
func Squat(t testing.TB, real, portCmd string, serve func(ln net.Listener, reached func())) (wrapper string, taken <-chan string) {
	t.Helper()
	dir := t.TempDir()
	wrapper = filepath.Join(dir, filepath.Base(real))
	require.NoError(t, os.WriteFile(wrapper, []byte(script), 0o755))
	t.Setenv("REAL_BIN", real)
	t.Setenv("PORT_CMD", portCmd)
	var once sync.Once
	release := func() { once.Do(func() { _ = os.WriteFile(filepath.Join(dir, "go"), nil, 0o600) }) }
	t.Cleanup(release)
	addr := make(chan string, 1)
	var mu sync.Mutex
	var ln net.Listener
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if ln != nil {
			_ = ln.Close()
		}
	})
	go func() {
		var port []byte
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			if b, err := os.ReadFile(filepath.Join(dir, "port")); err == nil {
				port = b
				break
			}
			time.Sleep(5 * time.Millisecond) // polling for the wrapper's file, against the deadline
		}
		p := strings.TrimSpace(string(port))
		if p == "" { // no port file (or an empty one): nothing to take
			release()
			addr <- ""
			return
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+p)
		if err != nil {
			release()
			addr <- ""
			return
		}
		mu.Lock()
		ln = l
		mu.Unlock()
		addr <- l.Addr().String()
		serve(l, release)
	}()
	return wrapper, addr
}

// AcceptAndClose is a serve for Squat: the other server accepts every
// connection and closes it, and lets the real binary start at once.
func AcceptAndClose(ln net.Listener, reached func()) {
	reached()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		_ = c.Close()
	}
}
