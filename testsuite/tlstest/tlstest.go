// Package tlstest makes a throwaway PKI for TLS tests: a CA, a server
// certificate for 127.0.0.1 and a client certificate, as PEM bytes, as
// files and as the tls values a test server needs.
package tlstest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// PKI is a CA valid for an hour around now, with one server and one
// client certificate it signed (ECDSA P-256).
type PKI struct {
	CAPEM []byte
	Pool  *x509.CertPool // holds the CA
	// Server is the server certificate (CN "server", IP 127.0.0.1).
	Server tls.Certificate
	// ClientCertPEM and ClientKeyPEM are the client certificate (CN
	// "client") and its key.
	ClientCertPEM, ClientKeyPEM []byte
	// CAFile, ClientCertFile and ClientKeyFile hold the same PEM in the
	// test's temporary folder.
	CAFile, ClientCertFile, ClientKeyFile string
}

// New makes a PKI for t; it fails t on any error.
func New(t testing.TB) *PKI {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("tlstest: %v", err)
		}
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	must(err)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tflo test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	must(err)
	ca, err := x509.ParseCertificate(caDER)
	must(err)
	leaf := func(serial int64, cn string, usage x509.ExtKeyUsage) (certPEM, keyPEM []byte) {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		must(err)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		must(err)
		kder, err := x509.MarshalECPrivateKey(key)
		must(err)
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	p := &PKI{CAPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), Pool: x509.NewCertPool()}
	p.Pool.AddCert(ca)
	sc, sk := leaf(2, "server", x509.ExtKeyUsageServerAuth)
	p.Server, err = tls.X509KeyPair(sc, sk)
	must(err)
	p.ClientCertPEM, p.ClientKeyPEM = leaf(3, "client", x509.ExtKeyUsageClientAuth)

	dir := t.TempDir()
	write := func(name string, b []byte) string {
		path := filepath.Join(dir, name)
		must(os.WriteFile(path, b, 0o600))
		return path
	}
	p.CAFile = write("ca.pem", p.CAPEM)
	p.ClientCertFile = write("client.pem", p.ClientCertPEM)
	p.ClientKeyFile = write("client.key", p.ClientKeyPEM)
	return p
}

// ServerConfig is a server TLS config that presents Server and requires a
// client certificate signed by the CA.
func (p *PKI) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{p.Server},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    p.Pool,
	}
}

// Serve serves h over TLS with ServerConfig (mutual TLS: a client needs
// the CA and the client certificate) until t ends.
func (p *PKI) Serve(t testing.TB, h http.Handler) *httptest.Server {
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = p.ServerConfig()
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}
