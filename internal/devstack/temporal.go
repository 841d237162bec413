package devstack

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/tflo-io/tflo/internal/loopport"
	"github.com/tflo-io/tflo/workflows"
)

// TemporalStartTimeout bounds how long StartTemporal waits for the
// frontend (and the web UI).
const TemporalStartTimeout = 90 * time.Second

// TemporalOptions configure StartTemporal.
type TemporalOptions struct {
	// Dir holds the SQLite database (temporal.db) and the server log
	// (required; a database already there is reused, with its workflows.
	// starter demo never reuses one: its --dir must be new or empty).
	Dir string
	// Bin is the temporal CLI (default: Binary("temporal", "TFLO_TEMPORAL")).
	Bin string
	// Port and UIPort of the frontend and the web UI (default: free
	// loopback ports).
	Port, UIPort int
	// Headless disables the web UI.
	Headless bool
	// Logger for the Temporal client the server is checked with (default
	// discard).
	Logger *slog.Logger
}

// Temporal is a running Temporal dev server (server + web UI) with tflo's
// search attributes registered.
type Temporal struct {
	// HostPort is the frontend gRPC address (127.0.0.1:P).
	HostPort string
	// UIURL is the web UI (http://127.0.0.1:U), empty when headless.
	UIURL string
	// Client is connected to the "default" namespace; Close closes it.
	Client client.Client
	// MetricsURL is the server's Prometheus endpoint
	// (http://127.0.0.1:M/metrics).
	MetricsURL string

	proc process
	bin  string
	args []string
	// addrs are the ports the server was given: it is ready once it
	// listens on all of them itself (see process.listening).
	addrs  []string
	once   sync.Once
	closed atomic.Bool // Close ran: Restart is refused
}

// StartTemporal runs `temporal server start-dev` on loopback with a
// SQLite database under o.Dir, tflo's search attributes
// (workflows.SearchAttributeFlags) and the web UI, and waits until the
// frontend answers a health check, the UI answers HTTP and the server
// listens on its ports itself. Ports it picks (see loopport) and finds
// taken when the server starts are picked again.
func StartTemporal(ctx context.Context, o TemporalOptions) (*Temporal, error) {
	return loopport.Retry(func() (*Temporal, error) { return startTemporal(ctx, o) }, portTaken)
}

func startTemporal(ctx context.Context, o TemporalOptions) (*Temporal, error) {
	if o.Dir == "" {
		return nil, fmt.Errorf("devstack: temporal needs a folder for its database (TemporalOptions.Dir is empty)")
	}
	if o.Bin == "" {
		bin, err := Binary("temporal", "TFLO_TEMPORAL")
		if err != nil {
			return nil, err
		}
		o.Bin = bin
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	port := func(p int) (int, error) {
		if p != 0 {
			return p, nil
		}
		return loopport.PickPort()
	}
	var err error
	if o.Port, err = port(o.Port); err != nil {
		return nil, err
	}
	args := []string{"server", "start-dev", "--ip", "127.0.0.1", "--port", strconv.Itoa(o.Port),
		"--db-filename", filepath.Join(o.Dir, "temporal.db"), "--log-level", "error"}
	t := &Temporal{HostPort: net.JoinHostPort("127.0.0.1", strconv.Itoa(o.Port)),
		proc: process{name: "temporal dev server", logPath: filepath.Join(o.Dir, "temporal.log")}}
	t.addrs = []string{t.HostPort}
	if o.Headless {
		args = append(args, "--headless")
	} else {
		if o.UIPort, err = port(o.UIPort); err != nil {
			return nil, err
		}
		args = append(args, "--ui-port", strconv.Itoa(o.UIPort))
		t.UIURL = "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(o.UIPort))
		t.addrs = append(t.addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(o.UIPort)))
	}
	for _, p := range []string{"--http-port", "--metrics-port"} {
		n, err := port(0)
		if err != nil {
			return nil, err
		}
		args = append(args, p, strconv.Itoa(n))
		t.addrs = append(t.addrs, net.JoinHostPort("127.0.0.1", strconv.Itoa(n)))
		if p == "--metrics-port" {
			t.MetricsURL = "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(n)) + "/metrics"
		}
	}
	args = append(args, workflows.SearchAttributeFlags()...)
	// start-dev turns this on so that search attributes added at run time
	// show at once: then every read of a history or of visibility reads
	// the namespace from SQLite (one connection for the whole server),
	// and a read that waits there over 3s is answered "Namespace default
	// is not found." (the server reports any failed read-through so).
	// tflo's attributes are registered at start (above), so the cache
	// the server otherwise keeps is always right.
	args = append(args, "--dynamic-config-value", "system.forceSearchAttributesCacheRefreshOnRead=false")
	t.bin, t.args = o.Bin, args
	if err := t.proc.start(o.Bin, args, nil); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			t.Close()
		}
	}()
	if err := t.waitReady(ctx, o.Logger); err != nil {
		return nil, err
	}
	ok = true
	return t, nil
}

// Stop kills the server (SIGKILL: an outage, not a clean shutdown); its
// database stays, and Restart brings it back on the same ports. The
// client stays open and reconnects once the server is back.
func (t *Temporal) Stop() { t.proc.stop(syscall.SIGKILL, 10*time.Second) }

// Restart starts a stopped server again on the same ports and database
// and waits until it answers. After Close it is refused: Close runs once,
// so nothing would stop the server it started.
func (t *Temporal) Restart(ctx context.Context) error {
	if t.closed.Load() {
		return fmt.Errorf("temporal dev server %s: Restart after Close", t.HostPort)
	}
	if err := t.proc.start(t.bin, t.args, nil); err != nil {
		return err
	}
	if err := t.waitReady(ctx, nil); err != nil {
		t.Stop()
		return err
	}
	return nil
}

// waitReady waits until the frontend answers a health check (dialing the
// client on first use), the web UI answers HTTP and the server listens on
// all its ports itself.
func (t *Temporal) waitReady(ctx context.Context, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	logger := tlog.NewStructuredLogger(log)
	return t.proc.waitReady(ctx, TemporalStartTimeout, 100*time.Millisecond, func() error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if t.Client == nil {
			dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			c, err := client.DialContext(dctx, client.Options{HostPort: t.HostPort, Logger: logger})
			cancel()
			if err != nil {
				return err
			}
			t.Client = c
		}
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := t.Client.CheckHealth(hctx, &client.CheckHealthRequest{}); err != nil {
			return err
		}
		if t.UIURL != "" {
			req, _ := http.NewRequestWithContext(hctx, http.MethodGet, t.UIURL, nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("web UI %s: %w", t.UIURL, err)
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode >= 500 {
				return fmt.Errorf("web UI %s: %s", t.UIURL, resp.Status)
			}
		}
		// Not just any answer: another server that took a port first
		// answers while this one exits with "address already in use"
		// (then started again on new ports).
		return t.proc.listening(t.addrs...)
	})
}

// Pid returns the server process's id (0 when it is not running), for
// reading its resource use from /proc.
func (t *Temporal) Pid() int {
	t.proc.mu.Lock()
	defer t.proc.mu.Unlock()
	if t.proc.cmd == nil || t.proc.cmd.Process == nil {
		return 0
	}
	return t.proc.cmd.Process.Pid
}

// LogTail returns about the last n bytes of the server's log.
func (t *Temporal) LogTail(n int64) string { return t.proc.logTail(n) }

// Close closes the client and stops the server (SIGTERM, then SIGKILL
// after 10 s). Idempotent.
func (t *Temporal) Close() error {
	t.once.Do(func() {
		t.closed.Store(true)
		if t.Client != nil {
			t.Client.Close()
		}
		t.proc.stop(syscall.SIGTERM, 10*time.Second)
	})
	return nil
}
