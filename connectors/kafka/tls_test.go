package kafka

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/twmb/franz-go/pkg/kfake"
)

type testPKI struct {
	caPEM              []byte
	serverCert         tls.Certificate
	clientCert, client []byte // PEM cert and key
}

func newTestPKI(t *testing.T) testPKI {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tflo test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		kder, err := x509.MarshalECPrivateKey(key)
		require.NoError(t, err)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	sc, sk := leaf(2, "broker", x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	server, err := tls.X509KeyPair(sc, sk)
	require.NoError(t, err)
	cc, ck := leaf(3, "client", x509.ExtKeyUsageClientAuth, nil)
	return testPKI{
		caPEM:      pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		serverCert: server, clientCert: cc, client: ck,
	}
}

// TestTLSClientCertificates: a broker that requires a client certificate
// signed by the custom CA accepts a Source and a Publisher configured with
// it, and refuses (with an error, promptly) a client without one.
func TestTLSClientCertificates(t *testing.T) {
	pki := newTestPKI(t)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(pki.caPEM))
	c := newCluster(t, 2, kfake.TLS(&tls.Config{
		Certificates: []tls.Certificate{pki.serverCert},
		ClientCAs:    pool, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	}))
	addrs := c.ListenAddrs()
	good := Security{TLS: &TLSConfig{CAPEM: pki.caPEM, CertPEM: pki.clientCert, KeyPEM: Secret(pki.client)}}
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

	j := &journal{}
	m := startMember(t, "tls", memberOpts(addrs, seqGraph(t), memory.New(), j, "tls", WithSecurity(good))...)
	require.Eventually(t, func() bool { return j.allReached(keys, 10) }, 20*time.Second, 5*time.Millisecond)
	m.stop(t)

	noCert := Security{TLS: &TLSConfig{CAPEM: pki.caPEM}}
	_, err = NewPublisher(ctx, PublishTo("readings", addrs...), PublisherSecurity(noCert))
	require.Error(t, err)
	require.NoError(t, ctx.Err(), "the refused client hung instead of failing")

	wrongCA := newTestPKI(t)
	_, err = NewPublisher(ctx, PublishTo("readings", addrs...), PublisherSecurity(Security{TLS: &TLSConfig{CAPEM: wrongCA.caPEM, CertPEM: pki.clientCert, KeyPEM: Secret(pki.client)}}))
	require.ErrorContains(t, err, "certificate")
}
