package influxtest_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/tflo-io/tflo/testsuite/influxtest"
)

func TestStartWriteQueryRestart(t *testing.T) {
	srv := influxtest.Start(t)
	srv.CreateDatabase(t, "h")
	post := func(body string) {
		t.Helper()
		resp, err := http.Post(srv.URL+"/write?db=h&precision=ns", "text/plain", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("write: %s", resp.Status)
		}
	}
	post("m,sensor=a value=1 1000\nm,sensor=a value=2 2000")
	if n := srv.Count(t, "h", "m"); n != 2 {
		t.Fatalf("count = %d, want 2", n)
	}
	srv.Stop()
	if _, err := http.Get(srv.URL + "/ping"); err == nil {
		t.Fatal("server still answers after Stop")
	}
	srv.Restart(t)
	if n := srv.Count(t, "h", "m"); n != 2 {
		t.Fatalf("count after a crash and restart = %d, want 2", n)
	}
}
