package tlsconfig_test

import (
	"crypto/tls"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/tlsconfig"
	"github.com/tflo-io/tflo/testsuite/tlstest"
)

// serve accepts TLS connections with cfg on loopback and completes each
// handshake; it returns the address.
func serve(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.(*tls.Conn).Handshake()
				_, _ = c.Write([]byte("ok"))
			}()
		}
	}()
	return ln.Addr().String()
}

// dial handshakes with addr and reads the server's greeting.
func dial(addr string, cfg *tls.Config) error {
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	buf := make([]byte, 2)
	_, err = c.Read(buf)
	return err
}

func TestBuildHandshakes(t *testing.T) {
	pki := tlstest.New(t)
	addr := serve(t, pki.ServerConfig())
	other := tlstest.New(t)

	cases := []struct {
		name  string
		cfg   tlsconfig.Config
		dials bool
	}{
		{"files", tlsconfig.Config{CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}, true},
		{"pem bytes", tlsconfig.Config{CAPEM: pki.CAPEM, CertPEM: pki.ClientCertPEM, KeyPEM: pki.ClientKeyPEM}, true},
		{"pem wins over a file", tlsconfig.Config{CAPEM: pki.CAPEM, CAFile: other.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}, true},
		{"ca and system roots", tlsconfig.Config{CAFile: pki.CAFile, SystemRoots: true, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}, true},
		{"no client certificate", tlsconfig.Config{CAFile: pki.CAFile}, false},
		{"another CA", tlsconfig.Config{CAFile: other.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}, false},
		{"client certificate of another CA", tlsconfig.Config{CAFile: pki.CAFile, CertFile: other.ClientCertFile, KeyFile: other.ClientKeyFile}, false},
		{"system roots only", tlsconfig.Config{CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}, false},
		{"wrong server name", tlsconfig.Config{CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile, ServerName: "elsewhere.example"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := tc.cfg.Build()
			require.NoError(t, err)
			require.GreaterOrEqual(t, cfg.MinVersion, uint16(tls.VersionTLS12))
			err = dial(addr, cfg)
			if tc.dials {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
			}
		})
	}
}

func TestApplyKeepsBase(t *testing.T) {
	pki := tlstest.New(t)
	other := tlstest.New(t)
	addr := serve(t, pki.ServerConfig())
	base := &tls.Config{MinVersion: tls.VersionTLS10, RootCAs: other.Pool, NextProtos: []string{"x"}}
	cfg, err := tlsconfig.Config{CAPEM: pki.CAPEM, CertPEM: pki.ClientCertPEM, KeyPEM: pki.ClientKeyPEM}.Apply(base)
	require.NoError(t, err)
	require.Equal(t, uint16(tls.VersionTLS12), cfg.MinVersion, "the minimum is raised to TLS 1.2")
	require.Equal(t, []string{"x"}, cfg.NextProtos, "the rest of base is kept")
	require.Equal(t, uint16(tls.VersionTLS10), base.MinVersion, "base itself is not changed")
	require.NoError(t, dial(addr, cfg), "the CA was added to base's roots")

	cfg, err = tlsconfig.Config{}.Apply(&tls.Config{RootCAs: pki.Pool, Certificates: []tls.Certificate{mustPair(t, pki)}})
	require.NoError(t, err)
	require.NoError(t, dial(addr, cfg), "an empty Config keeps base's roots and certificate")
}

func mustPair(t *testing.T, pki *tlstest.PKI) tls.Certificate {
	c, err := tls.X509KeyPair(pki.ClientCertPEM, pki.ClientKeyPEM)
	require.NoError(t, err)
	return c
}

func TestErrorsNameTheSettingAndFile(t *testing.T) {
	pki := tlstest.New(t)
	other := tlstest.New(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	notPEM := write("ca.txt", "not a certificate")
	empty := write("empty.pem", "")
	missing := filepath.Join(dir, "missing.pem")

	cases := []struct {
		name string
		cfg  tlsconfig.Config
		want []string
		is   error
	}{
		{"missing CA file", tlsconfig.Config{CAFile: missing}, []string{"ca_file", missing, "no such file"}, fs.ErrNotExist},
		{"CA file not PEM", tlsconfig.Config{CAFile: notPEM}, []string{"ca_file", notPEM, "holds no PEM certificate"}, nil},
		{"empty CA file", tlsconfig.Config{CAFile: empty}, []string{"ca_file", empty, "is empty"}, nil},
		{"CA bytes not PEM", tlsconfig.Config{CAPEM: []byte("nope")}, []string{"CA PEM", "holds no PEM certificate"}, nil},
		{"certificate without key", tlsconfig.Config{CertFile: pki.ClientCertFile}, []string{"cert_file", "key_file", "key_file is missing"}, nil},
		{"key without certificate", tlsconfig.Config{KeyPEM: pki.ClientKeyPEM}, []string{"cert_file is missing"}, nil},
		{"missing key file", tlsconfig.Config{CertFile: pki.ClientCertFile, KeyFile: missing}, []string{"key_file", missing}, fs.ErrNotExist},
		{"key of another certificate", tlsconfig.Config{CertFile: pki.ClientCertFile, KeyFile: other.ClientKeyFile}, []string{"cert_file", pki.ClientCertFile, other.ClientKeyFile, "does not match"}, nil},
		{"certificate where the key should be", tlsconfig.Config{CertFile: pki.ClientCertFile, KeyFile: pki.ClientCertFile}, []string{"key_file", "certificate"}, nil},
		{"other key names", tlsconfig.Config{CAFile: notPEM, Keys: tlsconfig.Keys{CA: "--tls-ca-path"}}, []string{"--tls-ca-path", notPEM}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.cfg.Build()
			require.Error(t, err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
			if tc.is != nil {
				require.True(t, errors.Is(err, tc.is), "%v", err)
			}
			for _, secret := range [][]byte{pki.ClientKeyPEM, other.ClientKeyPEM} {
				body := strings.Split(string(secret), "\n")[1] // a line of the key's base64
				require.NotContains(t, err.Error(), body, "an error quoted key material")
			}
		})
	}
}

func TestValidateAndIsZero(t *testing.T) {
	require.True(t, tlsconfig.Config{}.IsZero())
	require.False(t, tlsconfig.Config{ServerName: "x"}.IsZero())
	require.NoError(t, tlsconfig.Config{}.Validate())
	require.NoError(t, tlsconfig.Config{CertFile: "c", KeyFile: "k"}.Validate())
	require.ErrorContains(t, tlsconfig.Config{CertFile: "c"}.Validate(), "key_file is missing")
	cfg, err := tlsconfig.Config{}.Build()
	require.NoError(t, err)
	require.Nil(t, cfg.RootCAs, "no CA: the system roots")
	require.Empty(t, cfg.Certificates)
}
