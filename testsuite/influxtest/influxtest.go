// Package influxtest starts a real InfluxDB 1.8 server (influxd v1.8.10,
// built by `make tools` into ./bin) for tests: loopback ports, a temporary
// data/meta/wal folder, Flux and the /api/v2 write endpoint enabled.
//
//	srv := influxtest.Start(t)                    // skips when influxd is absent
//	srv.CreateDatabase(t, "signals")
//	client := influxdb2.NewClient(srv.URL, "")    // bucket "signals/autogen", org ""
//
// The server itself is internal/devstack's (shared with `starter demo`);
// this package adapts it to tests. Binary lookup (devstack.Binary's, as
// `starter demo` does it): $TFLO_INFLUXD, else <repo>/bin/influxd, else
// influxd on $PATH (which must be 1.8: Flux and /api/v2 of 1.8 are what
// the tests use). When it is missing the test is skipped with a message
// saying `make tools` builds it, unless TFLO_REQUIRE_SERVICES=1, which
// turns the skip into a failure.
//
// A Server is stopped at test end (t.Cleanup). Stop and Restart let a test
// take the server down mid-stream and bring it back on the same ports and
// data folder, so points acknowledged before the stop are still there.
// Server methods are safe for concurrent use.
package influxtest

import (
	"context"
	"os"
	"testing"

	"github.com/tflo-io/tflo/internal/devstack"
)

// StartTimeout bounds how long Start and Restart wait for /ping.
const StartTimeout = devstack.InfluxStartTimeout

// Option configures Start.
type Option func(*devstack.InfluxOptions)

// WithAuth enables authentication and creates the admin user (the first
// user of a fresh server may be created without credentials).
func WithAuth(user, password string) Option {
	return func(o *devstack.InfluxOptions) { o.User, o.Password = user, password }
}

// Server is a running (or stopped) influxd: a devstack.Influx whose
// methods fail the test instead of returning errors.
type Server struct {
	// URL is the HTTP base URL, e.g. http://127.0.0.1:41234.
	URL string

	s *devstack.Influx
}

// Result is the decoded body of an InfluxQL /query response.
type Result = devstack.InfluxResult

// Binary returns the influxd path to use, and false when it is missing.
func Binary() (string, bool) {
	p, err := devstack.Binary("influxd", "TFLO_INFLUXD")
	return p, err == nil
}

// Start starts influxd and waits until it answers /ping.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	if _, err := devstack.Binary("influxd", "TFLO_INFLUXD"); err != nil {
		if os.Getenv("TFLO_REQUIRE_SERVICES") == "1" {
			t.Fatal(err.Error() + " (TFLO_REQUIRE_SERVICES=1)")
		}
		t.Skip(err)
	}
	o := devstack.InfluxOptions{Dir: t.TempDir()}
	for _, f := range opts {
		f(&o)
	}
	s, err := devstack.StartInflux(context.Background(), o)
	if err != nil {
		t.Fatalf("influxtest: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("influxd log tail:\n%s", s.LogTail(4096))
		}
		s.Close()
	})
	return &Server{URL: s.URL, s: s}
}

// Stop kills influxd (SIGKILL: a crash, not a clean shutdown; the WAL
// keeps what was acknowledged) and waits for it to exit. Stopping a
// stopped server does nothing.
func (s *Server) Stop() { s.s.Stop() }

// Restart starts a stopped server again on the same ports and data.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	if err := s.s.Restart(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// CreateDatabase creates db (its default retention policy is "autogen",
// so the v2 bucket name is "<db>/autogen").
func (s *Server) CreateDatabase(t testing.TB, db string) {
	t.Helper()
	if err := s.s.CreateDatabase(context.Background(), db); err != nil {
		t.Fatal(err)
	}
}

// Query runs an InfluxQL statement against db with the admin credentials
// (when auth is on) and returns the decoded response.
func (s *Server) Query(t testing.TB, db, q string) Result {
	t.Helper()
	r, err := s.s.Query(context.Background(), db, q)
	if err != nil {
		t.Fatalf("influxtest: %v", err) // the error names the statement
	}
	return r
}

// Count returns the number of points of measurement in db (the count of
// field "value").
func (s *Server) Count(t testing.TB, db, measurement string) int {
	t.Helper()
	n, err := s.s.Count(context.Background(), db, measurement)
	if err != nil {
		t.Fatalf("influxtest: %v", err)
	}
	return n
}

// Influx returns the underlying devstack server.
func (s *Server) Influx() *devstack.Influx { return s.s }
