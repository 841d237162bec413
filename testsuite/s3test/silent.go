package s3test

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/tflo-io/tflo/internal/archiveloc"
)

// SilentSettings returns archive settings reaching a Silent endpoint,
// with keys in environment variables set for the test and no
// instance-metadata probe, and the given response timeout.
func SilentSettings(t testing.TB, timeout time.Duration) archiveloc.S3 {
	t.Helper()
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	t.Setenv("TFLO_TEST_S3_KEY", "key")
	t.Setenv("TFLO_TEST_S3_SECRET", "secret")
	return archiveloc.S3{Endpoint: Silent(t), Region: "us-east-1", AccessKeyEnv: "TFLO_TEST_S3_KEY", SecretKeyEnv: "TFLO_TEST_S3_SECRET",
		ResponseTimeout: timeout}
}

// Silent starts a TCP listener on a loopback port that accepts
// connections, reads what the client sends and never answers: an S3
// endpoint that stopped responding. It returns the endpoint's URL; the
// listener and its connections close at test end.
func Silent(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("silent S3 endpoint: %v", err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
		wg    sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed at test end
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(io.Discard, c) // until the client or the cleanup closes it
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return "http://" + ln.Addr().String()
}

// AwaitErr runs call with a context without deadline (as a background
// delete's or upload's) and returns its error; a call still waiting after
// 30s fails the test, naming what, instead of hanging it.
func AwaitErr(t testing.TB, what string, call func(ctx context.Context) error) error {
	t.Helper()
	res := make(chan error, 1)
	go func() { res <- call(context.Background()) }()
	select {
	case err := <-res:
		return err
	case <-time.After(30 * time.Second):
		t.Fatalf("%s is still waiting for a server that never answers", what)
		return nil
	}
}
