package devstack

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/tflo-io/tflo/internal/archiveloc"
)

// S3 is an in-process S3-compatible server (gofakes3, objects in memory)
// on loopback: the demo's archive. It accepts any credentials; its
// objects are gone when it stops.
type S3 struct {
	URL string

	srv  *http.Server
	done chan struct{}
	once sync.Once
}

// Variables S3.Settings names; StartS3 sets them in the process (the
// server accepts any keys, the S3 client needs some).
const (
	S3AccessKeyEnv = "TFLO_DEVSTACK_S3_ACCESS_KEY"
	S3SecretKeyEnv = "TFLO_DEVSTACK_S3_SECRET_KEY"
)

// StartS3 starts the server on a free loopback port with the buckets
// created.
func StartS3(buckets ...string) (*S3, error) {
	backend := s3mem.New()
	for _, b := range buckets {
		if err := backend.CreateBucket(b); err != nil {
			return nil, fmt.Errorf("devstack: s3 bucket %q: %w", b, err)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("devstack: s3: %w", err)
	}
	for k, v := range map[string]string{S3AccessKeyEnv: "devstack", S3SecretKeyEnv: "devstack-secret"} {
		if err := os.Setenv(k, v); err != nil {
			l.Close()
			return nil, fmt.Errorf("devstack: s3: %w", err)
		}
	}
	s := &S3{URL: "http://" + l.Addr().String(), done: make(chan struct{}),
		srv: &http.Server{Handler: gofakes3.New(backend).Server(), ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			_ = err // the listener failed: requests fail and say so
		}
	}()
	return s, nil
}

// Settings are the archive settings reaching the server.
func (s *S3) Settings() archiveloc.S3 {
	return archiveloc.S3{Endpoint: s.URL, Region: "us-east-1", AccessKeyEnv: S3AccessKeyEnv, SecretKeyEnv: S3SecretKeyEnv}
}

// Close stops the server and waits for it. Idempotent.
func (s *S3) Close() error {
	s.once.Do(func() {
		_ = s.srv.Close()
		<-s.done
	})
	return nil
}
