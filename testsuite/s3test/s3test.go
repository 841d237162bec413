// Package s3test starts a real S3-compatible server for tests: versitygw
// (posix backend, SigV4 checked, S3's multipart rules), built by
// `make tools` into ./bin. Lookup as testsuite/toolbin does
// ($TFLO_VERSITYGW, else <repo>/bin/versitygw; missing skips, or fails
// under TFLO_REQUIRE_SERVICES=1).
//
//	srv := s3test.Start(t, "archive")         // buckets to create
//	a, err := archiveloc.Open(ctx, loc, srv.Settings(t))
//
// The server is stopped at test end. Safe for concurrent use.
package s3test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/testsuite/toolbin"
)

// Server is a running versitygw.
type Server struct {
	URL       string
	AccessKey string
	SecretKey string
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
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	n.Lock()
	n.i++
	s := &Server{URL: "http://" + addr, AccessKey: fmt.Sprintf("AKIDS3TEST%04d", n.i), SecretKey: fmt.Sprintf("s3test-secret-%04d", n.i)}
	n.Unlock()
	logPath := filepath.Join(t.TempDir(), "versitygw.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	logTail := func() string { b, _ := os.ReadFile(logPath); return string(b) }
	cmd := exec.Command(bin, "--access", s.AccessKey, "--secret", s.SecretKey, "--port", addr, "posix", root)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	deadline := time.Now().Add(15 * time.Second)
	for {
		select {
		case <-exited:
			t.Fatalf("versitygw exited at start: %s", logTail())
		default:
		}
		if c, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			c.Close()
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("versitygw did not listen on %s: %s", addr, logTail())
		}
		time.Sleep(20 * time.Millisecond)
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
