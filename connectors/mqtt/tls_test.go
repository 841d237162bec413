package mqtt

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
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testPKI is a throwaway CA with one server and one client certificate.
type testPKI struct {
	dir                   string
	caFile                string
	serverCert            tls.Certificate
	clientCert, clientKey string
	pool                  *x509.CertPool
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	dir := t.TempDir()
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
	p := &testPKI{dir: dir, pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.caFile = filepath.Join(dir, "ca.pem")
	writePEM(t, p.caFile, "CERTIFICATE", caDER)

	issue := func(serial int64, usage x509.ExtKeyUsage, cn string) ([]byte, *ecdsa.PrivateKey) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		require.NoError(t, err)
		return der, key
	}
	sDER, sKey := issue(2, x509.ExtKeyUsageServerAuth, "broker")
	p.serverCert = tls.Certificate{Certificate: [][]byte{sDER}, PrivateKey: sKey}
	cDER, cKey := issue(3, x509.ExtKeyUsageClientAuth, "gateway")
	p.clientCert = filepath.Join(dir, "client.pem")
	p.clientKey = filepath.Join(dir, "client.key")
	writePEM(t, p.clientCert, "CERTIFICATE", cDER)
	kDER, err := x509.MarshalECPrivateKey(cKey)
	require.NoError(t, err)
	writePEM(t, p.clientKey, "EC PRIVATE KEY", kDER)
	return p
}

func writePEM(t *testing.T, path, typ string, der []byte) {
	t.Helper()
	require.NoError(t, os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600))
}

func TestTLSWithCustomCAAndClientCertificate(t *testing.T) {
	pki := newTestPKI(t)
	b := startBroker(t, brokerOpts{tls: &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{pki.serverCert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pki.pool,
	}})
	tlsURL := "tls://" + b.addr

	t.Run("mutual TLS delivers", func(t *testing.T) {
		cfg, err := TLSConfig(pki.caFile, pki.clientCert, pki.clientKey, "")
		require.NoError(t, err)
		s, err := NewSource(WithServers(tlsURL), WithClientID("edge-tls"), WithTopics("sensors/#"), WithTLS(cfg),
			WithBackoff(20*time.Millisecond, 200*time.Millisecond))
		require.NoError(t, err)
		var rec recorder
		runSource(t, s, rec.handle)
		waitSubscribed(t, s, 1)
		require.NoError(t, b.srv.Publish("sensors/t", reading("t", 1, 2), false, 2))
		require.Eventually(t, func() bool { return rec.len() == 1 }, waitFor, time.Millisecond)
	})
	t.Run("without a client certificate the broker refuses", func(t *testing.T) {
		cfg, err := TLSConfig(pki.caFile, "", "", "")
		require.NoError(t, err)
		s, err := NewSource(WithServers(tlsURL), WithClientID("edge-tls-nocert"), WithTopics("sensors/#"), WithTLS(cfg),
			WithBackoff(20*time.Millisecond, 200*time.Millisecond))
		require.NoError(t, err)
		r := runSource(t, s, func(context.Context, Message) error { return nil })
		require.Eventually(t, func() bool { return s.Stats().ConnectErrors >= 2 }, waitFor, time.Millisecond)
		assert.Zero(t, s.Stats().Connects)
		require.NoError(t, r.stop(t))
	})
}

func TestTLSConfigErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(bad, []byte("not a pem"), 0o600))
	_, err := TLSConfig(bad, "", "", "")
	require.ErrorContains(t, err, bad)
	_, err = TLSConfig("", filepath.Join(dir, "c.pem"), "", "")
	require.ErrorContains(t, err, "together")
}
