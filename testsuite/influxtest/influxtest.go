// Package influxtest starts a real InfluxDB 1.8 server (influxd v1.8.10,
// built by `make tools` into ./bin) for tests: loopback ports, a temporary
// data/meta/wal folder, Flux and the /api/v2 write endpoint enabled.
//
//	srv := influxtest.Start(t)                    // skips when influxd is absent
//	srv.CreateDatabase(t, "signals")
//	client := influxdb2.NewClient(srv.URL, "")    // bucket "signals/autogen", org ""
//
// Binary lookup: $TFLO_INFLUXD, else <repo>/bin/influxd. When it is
// missing the test is skipped with a message saying `make tools` builds
// it, unless TFLO_REQUIRE_SERVICES=1, which turns the skip into a failure.
//
// A Server is stopped at test end (t.Cleanup). Stop and Restart let a test
// take the server down mid-stream and bring it back on the same ports and
// data folder, so points acknowledged before the stop are still there.
// Server methods are safe for concurrent use.
package influxtest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// StartTimeout bounds how long Start and Restart wait for /ping.
const StartTimeout = 60 * time.Second

// Option configures Start.
type Option func(*options)

type options struct {
	auth           bool
	user, password string
}

// WithAuth enables authentication and creates the admin user (the first
// user of a fresh server may be created without credentials).
func WithAuth(user, password string) Option {
	return func(o *options) { o.auth, o.user, o.password = true, user, password }
}

// Server is a running (or stopped) influxd.
type Server struct {
	// URL is the HTTP base URL, e.g. http://127.0.0.1:41234.
	URL string

	dir      string
	conf     string
	httpAddr string
	opts     options
	bin      string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
}

// Binary returns the influxd path to use, and false when it is missing.
func Binary() (string, bool) {
	if p := os.Getenv("TFLO_INFLUXD"); p != "" {
		_, err := os.Stat(p)
		return p, err == nil
	}
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return "", false
	}
	p := filepath.Join(filepath.Dir(file), "..", "..", "bin", "influxd")
	_, err := os.Stat(p)
	return p, err == nil
}

// Start starts influxd and waits until it answers /ping.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	bin, ok := Binary()
	if !ok {
		msg := fmt.Sprintf("influxd not found (looked at $TFLO_INFLUXD and %s); `make tools` builds it", bin)
		if os.Getenv("TFLO_REQUIRE_SERVICES") == "1" {
			t.Fatal(msg + " (TFLO_REQUIRE_SERVICES=1)")
		}
		t.Skip(msg)
	}
	s := &Server{dir: t.TempDir(), bin: bin}
	for _, o := range opts {
		o(&s.opts)
	}
	httpAddr, rpcAddr := freeAddr(t), freeAddr(t)
	s.httpAddr = httpAddr
	s.URL = "http://" + httpAddr
	conf := fmt.Sprintf(`reporting-disabled = true
bind-address = %q

[meta]
  dir = %q
  logging-enabled = false

[data]
  dir = %q
  wal-dir = %q
  query-log-enabled = false
  wal-fsync-delay = "0s"

[coordinator]
  log-queries-after = "0s"

[retention]
  enabled = false

[monitor]
  store-enabled = false

[continuous_queries]
  enabled = false

[http]
  bind-address = %q
  auth-enabled = %t
  flux-enabled = true
  log-enabled = false
  pprof-enabled = false

[logging]
  level = "warn"
`, rpcAddr, filepath.Join(s.dir, "meta"), filepath.Join(s.dir, "data"), filepath.Join(s.dir, "wal"), httpAddr, s.opts.auth)
	s.conf = filepath.Join(s.dir, "influxdb.conf")
	if err := os.WriteFile(s.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		s.Stop()
		if t.Failed() {
			t.Logf("influxd log tail:\n%s", s.logTail(4096))
		}
	})
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	if s.opts.auth {
		q := fmt.Sprintf("CREATE USER %q WITH PASSWORD '%s' WITH ALL PRIVILEGES", s.opts.user, strings.ReplaceAll(s.opts.password, "'", `\'`))
		if _, err := s.query(context.Background(), "", q, false); err != nil {
			t.Fatalf("influxtest: create admin user: %v", err)
		}
	}
	return s
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		return fmt.Errorf("influxtest: influxd already running")
	}
	logf, err := os.OpenFile(filepath.Join(s.dir, "influxd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.bin, "-config", s.conf)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), "INFLUXDB_DATA_QUERY_LOG_ENABLED=false")
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("influxtest: start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.cmd, s.done, s.log = cmd, done, logf

	deadline := time.Now().Add(StartTimeout)
	for {
		select {
		case <-done:
			s.cmd = nil
			logf.Close()
			return fmt.Errorf("influxtest: influxd exited during start-up: %s", s.logTailLocked(2048))
		default:
		}
		if err := s.ping(); err == nil {
			return nil
		} else if time.Now().After(deadline) {
			return fmt.Errorf("influxtest: influxd at %s not ready after %v: %v", s.URL, StartTimeout, err)
		}
		select {
		case <-done:
		case <-time.After(50 * time.Millisecond): // poll interval of the readiness wait
		}
	}
}

func (s *Server) ping() error {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get(s.URL + "/ping")
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("/ping: %s", resp.Status)
	}
	return nil
}

// Stop kills influxd (SIGKILL: a crash, not a clean shutdown; the WAL
// keeps what was acknowledged) and waits for it to exit. Stopping a
// stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	<-s.done
	s.log.Close()
	s.cmd = nil
}

// Restart starts a stopped server again on the same ports and data.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

// CreateDatabase creates db (its default retention policy is "autogen",
// so the v2 bucket name is "<db>/autogen").
func (s *Server) CreateDatabase(t testing.TB, db string) {
	t.Helper()
	if _, err := s.query(context.Background(), "", fmt.Sprintf("CREATE DATABASE %q", db), true); err != nil {
		t.Fatalf("influxtest: create database %s: %v", db, err)
	}
}

// Result is the decoded body of an InfluxQL /query response.
type Result struct {
	Results []struct {
		Series []struct {
			Name    string `json:"name"`
			Tags    map[string]string
			Columns []string `json:"columns"`
			Values  [][]any  `json:"values"`
		} `json:"series"`
		Error string `json:"error"`
	} `json:"results"`
	Error string `json:"error"`
}

// Query runs an InfluxQL statement against db with the admin credentials
// (when auth is on) and returns the decoded response.
func (s *Server) Query(t testing.TB, db, q string) Result {
	t.Helper()
	r, err := s.query(context.Background(), db, q, true)
	if err != nil {
		t.Fatalf("influxtest: query %q: %v", q, err)
	}
	return r
}

// Count returns the number of points of measurement in db (the count of
// field "value").
func (s *Server) Count(t testing.TB, db, measurement string) int {
	t.Helper()
	r := s.Query(t, db, fmt.Sprintf("SELECT count(\"value\") FROM %q", measurement))
	if len(r.Results) == 0 || len(r.Results[0].Series) == 0 {
		return 0
	}
	v := r.Results[0].Series[0].Values[0][1]
	n, ok := v.(json.Number)
	if !ok {
		t.Fatalf("influxtest: count is %T %v", v, v)
	}
	i, err := n.Int64()
	if err != nil {
		t.Fatal(err)
	}
	return int(i)
}

func (s *Server) query(ctx context.Context, db, q string, withAuth bool) (Result, error) {
	form := url.Values{"q": {q}}
	if db != "" {
		form.Set("db", db)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/query", strings.NewReader(form.Encode()))
	if err != nil {
		return Result{}, err
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if withAuth && s.opts.auth {
		req.SetBasicAuth(s.opts.user, s.opts.password)
	}
	c := http.Client{Timeout: 30 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		return Result{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return Result{}, err
	}
	var r Result
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&r); err != nil {
		return Result{}, fmt.Errorf("/query %s: %s: %w", resp.Status, body, err)
	}
	if resp.StatusCode != http.StatusOK || r.Error != "" {
		return r, fmt.Errorf("/query %s: %s", resp.Status, body)
	}
	for _, res := range r.Results {
		if res.Error != "" {
			return r, fmt.Errorf("/query: %s", res.Error)
		}
	}
	return r, nil
}

func (s *Server) logTail(n int64) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.logTailLocked(n)
}

func (s *Server) logTailLocked(n int64) string {
	f, err := os.Open(filepath.Join(s.dir, "influxd.log"))
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	st, _ := f.Stat()
	if st != nil && st.Size() > n {
		f.Seek(st.Size()-n, io.SeekStart)
	}
	var b strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	return b.String()
}
