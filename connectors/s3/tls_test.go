package s3_test

import (
	"context"
	"encoding/pem"
	"net/http/httptest"
	"testing"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"

	s3store "github.com/tflo-io/tflo/connectors/s3"
)

// A TLS endpoint signed by a private CA works with WithCACert and is
// refused without it.
func TestTLSCustomCA(t *testing.T) {
	backend := s3mem.New()
	require.NoError(t, backend.CreateBucket(testBucket))
	srv := httptest.NewTLSServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	ctx := context.Background()
	base := []s3store.Option{
		s3store.WithEndpoint(srv.URL), s3store.WithPathStyle(true), s3store.WithRegion("us-east-1"),
		s3store.WithStaticCredentials("AKIDTLS", "tls-secret", ""),
	}

	trusted, err := s3store.New(ctx, testBucket, append(base, s3store.WithCACert(caPEM))...)
	require.NoError(t, err)
	require.NoError(t, trusted.SaveBatch(ctx, batch(10, 1)))
	got, err := trusted.Load(ctx, []byte("sensor/000004"))
	require.NoError(t, err)
	require.Equal(t, snap(4, 1), got)

	untrusted, err := s3store.New(ctx, testBucket, base...)
	require.NoError(t, err)
	_, err = untrusted.Load(ctx, []byte("sensor/000004"))
	require.ErrorContains(t, err, "certificate")
	require.ErrorContains(t, err, srv.URL)
	require.NotContains(t, err.Error(), "tls-secret")
}
