package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/tflo-io/tflo/testsuite/tlstest"
)

// TestTLSClientCertificates: a broker that requires a client certificate
// signed by the custom CA accepts a Source and a Publisher configured with
// it, and refuses (with an error, promptly) a client without one.
func TestTLSClientCertificates(t *testing.T) {
	pki := tlstest.New(t)
	c := newCluster(t, 2, kfake.TLS(pki.ServerConfig()))
	addrs := c.ListenAddrs()
	good := Security{TLS: &TLSConfig{CAPEM: pki.CAPEM, CertPEM: pki.ClientCertPEM, KeyPEM: Secret(pki.ClientKeyPEM)}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	pub, err := NewPublisher(ctx, PublishTo("readings", addrs...), PublisherSecurity(good))
	require.NoError(t, err)
	defer pub.Close()
	keys := sensorKeys(4)
	for seq := 1; seq <= 10; seq++ {
		for _, k := range keys {
			require.NoError(t, pub.Publish(ctx, k, reading(k, seq)))
		}
	}
	require.NoError(t, pub.Flush(ctx))

	l := newLedger()
	m := startMember(t, "tls", WithBrokers(addrs...), WithGroup("central"), WithTopics("readings"), WithPartitions(l.as("tls")), WithSecurity(good))
	require.Eventually(t, func() bool { return l.count() == 10*len(keys) }, 20*time.Second, 5*time.Millisecond)
	m.stop(t)

	noCert := Security{TLS: &TLSConfig{CAPEM: pki.CAPEM}}
	_, err = NewPublisher(ctx, PublishTo("readings", addrs...), PublisherSecurity(noCert))
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "the refused client hung instead of failing")

	wrongCA := tlstest.New(t)
	_, err = NewPublisher(ctx, PublishTo("readings", addrs...), PublisherSecurity(Security{TLS: &TLSConfig{CAPEM: wrongCA.CAPEM, CertPEM: pki.ClientCertPEM, KeyPEM: Secret(pki.ClientKeyPEM)}}))
	require.ErrorContains(t, err, "certificate")
}
