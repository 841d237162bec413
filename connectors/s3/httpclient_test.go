package s3_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	s3store "github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/testsuite/tlstest"
)

// countingTransport counts the requests sent through it.
type countingTransport struct{ n atomic.Int64 }

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// TestHTTPClientWithACABundleInTheEnvironment: the SDK applies
// AWS_CA_BUNDLE (set on many hosts, CI images among them) to the HTTP
// client it loads its configuration with, and refuses a plain
// *http.Client it cannot add the CA to ("unable to add custom RootCAs
// HTTPClient, has no WithTransportOptions"), so WithHTTPClient failed at
// New wherever the variable was set. The client's TLS is its own: the
// store now sends through it as given.
func TestHTTPClientWithACABundleInTheEnvironment(t *testing.T) {
	t.Setenv("AWS_CA_BUNDLE", tlstest.New(t).CAFile)
	f := newFakeS3(t)
	tr := &countingTransport{}
	st, _ := f.store(t, s3store.WithPrefix("hc"), s3store.WithHTTPClient(&http.Client{Transport: tr}))
	ctx := context.Background()
	require.NoError(t, st.Save(ctx, []byte("k"), snap(1, 1)))
	got, err := st.Load(ctx, []byte("k"))
	require.NoError(t, err)
	require.Equal(t, snap(1, 1).Data, got.Data)
	require.Positive(t, tr.n.Load(), "requests go through the given client")
}
