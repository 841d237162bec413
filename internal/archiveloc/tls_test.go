package archiveloc

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"

	"github.com/tflo-io/tflo/testsuite/tlstest"
)

// TestS3ArchiveBehindPrivateCA is issue 17.10: s3:// archives (backfills,
// the archive tools) took no custom CA, so an S3 endpoint signed by a
// private CA was out of reach. TFLO_S3_CA_FILE (S3.CAFile) names it.
func TestS3ArchiveBehindPrivateCA(t *testing.T) {
	pki := tlstest.New(t)
	backend := s3mem.New()
	if err := backend.CreateBucket("archive"); err != nil {
		t.Fatal(err)
	}
	// A server certificate from the private CA (no client certificate
	// asked: the CA is what this test is about).
	srv := httptest.NewUnstartedServer(gofakes3.New(backend).Server())
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pki.Server}}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	t.Setenv("TFLO_TEST_AK", "AKID")
	t.Setenv("TFLO_TEST_SK", "secret")
	env := map[string]string{EnvEndpoint: srv.URL, EnvRegion: "us-east-1", EnvAccessKeyEnv: "TFLO_TEST_AK", EnvSecretKeyEnv: "TFLO_TEST_SK", EnvCAFile: pki.CAFile}
	c, err := S3FromEnv(lookupIn(env))
	if err != nil || c.CAFile != pki.CAFile {
		t.Fatalf("settings %+v", c)
	}
	loc, err := Parse("s3://archive/prod")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	a, err := Open(ctx, loc, c)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.PutAtomic(ctx, "x/file", []byte("data")); err != nil {
		t.Fatalf("write through the private CA: %v", err)
	}

	c.CAFile = ""
	a, err = Open(ctx, loc, c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.List(ctx, "x/"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("without the CA: %v", err)
	}
	c.CAFile = filepath.Join(t.TempDir(), "missing.pem")
	if _, err := Open(ctx, loc, c); err == nil || !strings.Contains(err.Error(), "s3 ca_file") || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing CA file: %v", err)
	}
}
