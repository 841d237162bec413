package mosquittotest

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/tflo-io/tflo/internal/loopport"
)

// Options configure Start.
type Options struct {
	// MaxInflight is mosquitto's max_inflight_messages (0: its default,
	// 20): the in-flight window of a client that announces no Receive
	// Maximum.
	MaxInflight int
}

// Broker is a running mosquitto.
type Broker struct {
	addr string
	cmd  *exec.Cmd
	mu   sync.Mutex
	log  bytes.Buffer
}

// Binary returns the mosquitto to run, and false when there is none.
func Binary() (string, bool) {
	if p := os.Getenv("TFLO_MOSQUITTO"); p != "" {
		_, err := os.Stat(p)
		return p, err == nil
	}
	if p, err := exec.LookPath("mosquitto"); err == nil {
		return p, true
	}
	p := "/usr/sbin/mosquitto"
	_, err := os.Stat(p)
	return p, err == nil
}

// Start starts mosquitto on a free loopback port and waits until it logs
// that it is running and accepts connections.
func Start(t testing.TB, opts ...Options) *Broker {
	t.Helper()
	bin, ok := Binary()
	if !ok {
		msg := "mosquitto not found (looked at $TFLO_MOSQUITTO, PATH and /usr/sbin); `apt-get install -y mosquitto` installs it"
		if os.Getenv("TFLO_REQUIRE_SERVICES") == "1" {
			t.Fatal(msg + " (TFLO_REQUIRE_SERVICES=1)")
		}
		t.Skip(msg)
	}
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	// A port taken before mosquitto bound it: again on a new one.
	b, err := loopport.Retry(func() (*Broker, error) { return start(t, bin, o) }, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// start runs mosquitto on a newly picked port and waits until it is
// running and accepts connections; on failure the process is gone and the
// error carries its log.
func start(t testing.TB, bin string, o Options) (*Broker, error) {
	addr, err := loopport.Pick()
	if err != nil {
		return nil, fmt.Errorf("mosquittotest: %w", err)
	}
	_, port, _ := net.SplitHostPort(addr)
	// max_queued_messages as deploy/mosquitto.conf sets it: the default
	// (1000) drops what a session collects while its client restarts.
	// log_dest: its "running" line on stderr is what Start waits for.
	conf := fmt.Sprintf("listener %s 127.0.0.1\nallow_anonymous true\npersistence false\nmax_queued_messages 100000\nlog_dest stderr\n", port)
	if o.MaxInflight > 0 {
		conf += fmt.Sprintf("max_inflight_messages %d\n", o.MaxInflight)
	}
	path := filepath.Join(t.TempDir(), "mosquitto.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return nil, fmt.Errorf("mosquittotest: %w", err)
	}
	b := &Broker{addr: addr}
	b.cmd = exec.Command(bin, "-c", path)
	b.cmd.Stdout, b.cmd.Stderr = (*logWriter)(b), (*logWriter)(b)
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("mosquittotest: start %s: %w", bin, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- b.cmd.Wait() }()
	stop := func() {
		_ = b.cmd.Process.Kill()
		<-exited
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		// A connection accepted on the port is not enough: another server
		// that took the port first accepts it while mosquitto exits with
		// "Address already in use". Mosquitto says "running" once it has
		// bound its listener.
		err := errNotRunning
		if running.MatchString(b.Log()) {
			var c net.Conn
			if c, err = net.DialTimeout("tcp", addr, time.Second); err == nil {
				c.Close()
			}
		}
		if err == nil {
			t.Cleanup(func() {
				stop()
				if t.Failed() {
					t.Logf("mosquitto log:\n%s", b.Log())
				}
			})
			return b, nil
		}
		select {
		case err := <-exited:
			return nil, fmt.Errorf("mosquittotest: mosquitto exited: %v\n%s", err, b.Log())
		default:
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("mosquittotest: mosquitto not accepting on %s after 10s: %v\n%s", addr, err, b.Log())
		}
		time.Sleep(10 * time.Millisecond) // polling the port against its deadline
	}
}

// running is the line mosquitto logs once its listeners are bound.
var running = regexp.MustCompile(`(?m)mosquitto version \S+ running$`)

var errNotRunning = errors.New(`no "mosquitto version ... running" line in its log yet`)

// Addr is the host:port clients connect to.
func (b *Broker) Addr() string { return b.addr }

// URL is the broker's mqtt:// URL.
func (b *Broker) URL() string { return "mqtt://" + b.addr }

// Log returns what mosquitto printed.
func (b *Broker) Log() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.log.String()
}

type logWriter Broker

func (w *logWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.log.Write(p)
}
