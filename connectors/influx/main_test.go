package influx_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tflo-io/tflo/internal/benchratio"
	"github.com/tflo-io/tflo/internal/devstack"
	"github.com/tflo-io/tflo/testsuite/influxtest"
)

// One influxd serves every test that neither stops the server nor needs
// auth (each of those starts its own with influxtest.Start); tests keep
// apart by measurement name. It is started on first use and stopped after
// the tests, in TestMain.
var shared struct {
	once sync.Once
	dir  string
	srv  *devstack.Influx
	err  error
}

func TestMain(m *testing.M) {
	flag.Parse()
	benchratio.Baselines{"BenchmarkSinkBatch": {"raw-http-post": rawPost}}.Measure()
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Close()
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// testServer is the shared influxd seen through test helpers.
type testServer struct {
	URL string
	inf *devstack.Influx
}

// sharedServer returns the shared influxd, starting it on first use. When
// the binary is missing it skips (or fails under TFLO_REQUIRE_SERVICES=1)
// exactly like influxtest.Start.
func sharedServer(t testing.TB) *testServer {
	t.Helper()
	if _, ok := influxtest.Binary(); !ok {
		influxtest.Start(t) // skips or fails with the standard message
		return nil
	}
	shared.once.Do(func() {
		if shared.dir, shared.err = os.MkdirTemp("", "influx-shared-"); shared.err != nil {
			return
		}
		shared.srv, shared.err = devstack.StartInflux(context.Background(), devstack.InfluxOptions{Dir: shared.dir})
	})
	if shared.err != nil {
		t.Fatalf("shared influxd: %v", shared.err)
	}
	return &testServer{URL: shared.srv.URL, inf: shared.srv}
}

var measurementSeq atomic.Int64

// measurement returns base made unique within the process, so tests on
// the shared server (and repeated runs under -count) never see each
// other's points.
func measurement(base string) string {
	return fmt.Sprintf("%s_%d", base, measurementSeq.Add(1))
}

func (s *testServer) CreateDatabase(t testing.TB, db string) {
	t.Helper()
	if err := s.inf.CreateDatabase(context.Background(), db); err != nil {
		t.Fatal(err)
	}
}

func (s *testServer) Count(t testing.TB, db, measurement string) int {
	t.Helper()
	n, err := s.inf.Count(context.Background(), db, measurement)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
