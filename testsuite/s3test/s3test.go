// Package s3test starts a real S3-compatible server for tests: versitygw
// (posix backend, SigV4 checked, S3's multipart rules), built by
// `make tools` into ./bin. Lookup as testsuite/toolbin does
// ($TFLO_VERSITYGW, else <repo>/bin/versitygw; missing skips, or fails
// under TFLO_REQUIRE_SERVICES=1).
//
//	srv := s3test.Start(t, "archive")         // buckets to create
//	a, err := archiveloc.Open(ctx, loc, srv.Settings(t))
//	srv.Stop()                                // an outage: SIGKILL
//	srv.Restart(t)                            // same port, same objects
//
// The server is stopped at test end. Safe for concurrent use.
package s3test

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/internal/loopport"
	"github.com/tflo-io/tflo/testsuite/toolbin"
)

// Server is a running versitygw.
type Server struct {
	URL       string
	AccessKey string
	SecretKey string

	bin, root, addr, logPath string
	// health is the path versitygw answers 200 on (--health), unique to
	// this server: what tells it from another server on its port.
	health string

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited; nil when stopped
}

var n struct {
	sync.Mutex
	i int
}

// Start starts versitygw on a loopback port with the buckets created.
func Start(t testing.TB, buckets ...string) *Server {
	t.Helper()
	bin := toolbin.Require(t, "versitygw", "TFLO_VERSITYGW")
	root := t.TempDir()
	for _, b := range buckets {
		if err := os.Mkdir(filepath.Join(root, b), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	n.Lock()
	n.i++
	s := &Server{AccessKey: fmt.Sprintf("AKIDS3TEST%04d", n.i), SecretKey: fmt.Sprintf("s3test-secret-%04d", n.i),
		bin: bin, root: root, logPath: filepath.Join(t.TempDir(), "versitygw.log"),
		health: fmt.Sprintf("/s3test-health-%d-%04d", os.Getpid(), n.i)}
	n.Unlock()
	t.Cleanup(s.Stop)
	// A port taken before versitygw bound it: again on a new one.
	_, err := loopport.Retry(func() (struct{}, error) {
		addr, err := loopport.Pick()
		if err != nil {
			return struct{}{}, err
		}
		s.addr, s.URL = addr, "http://"+addr
		return struct{}{}, s.start()
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// start runs versitygw on the server's port and folder and waits until it
// answers on its health path.
func (s *Server) start() error {
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	logStart, _ := logf.Seek(0, io.SeekEnd)
	logTail := func() string { // this start's lines
		b, _ := os.ReadFile(s.logPath)
		return string(b[min(int(logStart), len(b)):])
	}
	cmd := exec.Command(s.bin, "--access", s.AccessKey, "--secret", s.SecretKey, "--port", s.addr, "--health", s.health, "posix", s.root)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.mu.Lock()
	s.cmd, s.exited = cmd, exited
	s.mu.Unlock()
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-exited:
			s.mu.Lock()
			s.cmd, s.exited = nil, nil
			s.mu.Unlock()
			return fmt.Errorf("s3test: versitygw exited at start on %s: %s", s.addr, logTail())
		default:
		}
		// Not a connection accepted on the port: another server that took
		// the port first accepts it while versitygw exits with "address
		// already in use". Only this versitygw answers its health path.
		err := s.healthy()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.Stop() // a start that failed leaves no process behind, as one that exited
			return fmt.Errorf("s3test: versitygw not answering on %s within 15s (%v): %s", s.addr, err, logTail())
		}
		time.Sleep(20 * time.Millisecond) // polling the port, with the deadline above
	}
}

// healthy is nil when this server's versitygw answers its health path.
func (s *Server) healthy() error {
	c := http.Client{Timeout: time.Second}
	resp, err := c.Get("http://" + s.addr + s.health)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s, not this server's health check (another server on the port?)", s.health, resp.Status)
	}
	return nil
}

// Stop kills the server (SIGKILL: an outage, not a clean shutdown) and
// waits until it has exited, so requests fail from now on. Its objects
// stay in its folder. Stopping a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd, s.exited = nil, nil
}

// Restart starts a stopped server again on the same port, keys and
// objects, and waits until it answers (failing t after 15s).
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.mu.Lock()
	running := s.cmd != nil
	s.mu.Unlock()
	if running {
		t.Fatal("s3test: Restart of a running server (Stop it first)")
	}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
}

// Settings returns the archive settings reaching the server, with the
// keys in environment variables set for the test.
func (s *Server) Settings(t testing.TB) archiveloc.S3 {
	id := strings.ToUpper(strings.TrimPrefix(s.AccessKey, "AKIDS3TEST"))
	ak, sk := "S3TEST_ACCESS_"+id, "S3TEST_SECRET_"+id
	t.Setenv(ak, s.AccessKey)
	t.Setenv(sk, s.SecretKey)
	return archiveloc.S3{Endpoint: s.URL, Region: "us-east-1", AccessKeyEnv: ak, SecretKeyEnv: sk}
}
