package tlsconfig

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// Config is the client TLS material of one connection. The zero value
// means TLS with the system roots and no client certificate.
type Config struct {
	// CAFile is a PEM file of the CA certificates that sign the server's
	// certificate. Empty: the system roots.
	CAFile string `json:"ca_file,omitempty" yaml:"ca_file,omitempty"`
	// CertFile and KeyFile are the PEM client certificate and its key, for
	// servers that require mutual TLS. Both or neither.
	CertFile string `json:"cert_file,omitempty" yaml:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty" yaml:"key_file,omitempty"`
	// ServerName overrides the name checked in the server's certificate.
	// Empty: the host dialled.
	ServerName string `json:"server_name,omitempty" yaml:"server_name,omitempty"`

	// CAPEM, CertPEM and KeyPEM are the same material as bytes, set from
	// code; each wins over its file.
	CAPEM   []byte `json:"-" yaml:"-"`
	CertPEM []byte `json:"-" yaml:"-"`
	KeyPEM  []byte `json:"-" yaml:"-"`

	// SystemRoots trusts the system roots as well as the CA, instead of the
	// CA alone. Default false.
	SystemRoots bool `json:"-" yaml:"-"`

	// Keys names the settings in error messages. Default: DefaultKeys.
	Keys Keys `json:"-" yaml:"-"`
}

// Keys are the names a user typed for the CA, certificate and key files.
type Keys struct{ CA, Cert, Key string }

// DefaultKeys are Config's own YAML keys.
var DefaultKeys = Keys{CA: "ca_file", Cert: "cert_file", Key: "key_file"}

func (c Config) keys() Keys {
	k := c.Keys
	if k.CA == "" {
		k.CA = DefaultKeys.CA
	}
	if k.Cert == "" {
		k.Cert = DefaultKeys.Cert
	}
	if k.Key == "" {
		k.Key = DefaultKeys.Key
	}
	return k
}

// IsZero reports whether c sets nothing (TLS with Go's defaults).
func (c Config) IsZero() bool {
	return c.CAFile == "" && c.CertFile == "" && c.KeyFile == "" && c.ServerName == "" &&
		len(c.CAPEM) == 0 && len(c.CertPEM) == 0 && len(c.KeyPEM) == 0 && !c.SystemRoots
}

// Validate checks what can be checked without reading files: a client
// certificate comes with its key and the other way round.
func (c Config) Validate() error {
	k := c.keys()
	hasCert := c.CertFile != "" || len(c.CertPEM) > 0
	hasKey := c.KeyFile != "" || len(c.KeyPEM) > 0
	switch {
	case hasCert && !hasKey:
		return fmt.Errorf("tls: a client certificate needs both %s and %s; %s is missing", k.Cert, k.Key, k.Key)
	case hasKey && !hasCert:
		return fmt.Errorf("tls: a client certificate needs both %s and %s; %s is missing", k.Cert, k.Key, k.Cert)
	}
	return nil
}

// Build returns the client tls.Config: TLS 1.2 or newer, RootCAs from the
// CA (nil, the system roots, when none is given), the client certificate
// and ServerName.
func (c Config) Build() (*tls.Config, error) { return c.Apply(nil) }

// Apply returns a copy of base (nil: an empty config) with c's settings
// laid over it: the CA is added to base's roots if it has any, the client
// certificate replaces base's, a non-empty ServerName replaces base's, and
// the minimum version is raised to TLS 1.2.
func (c Config) Apply(base *tls.Config) (*tls.Config, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	tc := &tls.Config{}
	if base != nil {
		tc = base.Clone()
	}
	if tc.MinVersion < tls.VersionTLS12 {
		tc.MinVersion = tls.VersionTLS12
	}
	if c.ServerName != "" {
		tc.ServerName = c.ServerName
	}
	k := c.keys()
	ca, caName, err := c.read(c.CAPEM, c.CAFile, k.CA, "CA PEM")
	if err != nil {
		return nil, err
	}
	if len(ca) > 0 {
		var pool *x509.CertPool
		switch {
		case tc.RootCAs != nil:
			pool = tc.RootCAs.Clone()
		case c.SystemRoots:
			if pool, err = x509.SystemCertPool(); err != nil || pool == nil {
				pool = x509.NewCertPool()
			}
		default:
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(ca) {
			return nil, fmt.Errorf("tls: %s holds no PEM certificate", caName)
		}
		tc.RootCAs = pool
	}
	cert, certName, err := c.read(c.CertPEM, c.CertFile, k.Cert, "client certificate PEM")
	if err != nil {
		return nil, err
	}
	key, keyName, err := c.read(c.KeyPEM, c.KeyFile, k.Key, "client key PEM")
	if err != nil {
		return nil, err
	}
	if len(cert) > 0 || len(key) > 0 {
		pair, err := tls.X509KeyPair(cert, key)
		if err != nil {
			// crypto/tls's messages say what is wrong (no PEM block, a
			// certificate where the key should be, a key that does not
			// match) and never quote the key.
			return nil, fmt.Errorf("tls: %s with %s: %v", certName, keyName, err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// read returns the PEM bytes (pem, else the file's contents) and how to
// name them in a message.
func (c Config) read(pem []byte, file, key, pemName string) ([]byte, string, error) {
	if len(pem) > 0 {
		return pem, "the " + pemName, nil
	}
	if file == "" {
		return nil, "", nil
	}
	name := fmt.Sprintf("%s %q", key, file)
	b, err := os.ReadFile(file)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err // the path is in name already
		}
		return nil, "", fmt.Errorf("tls: %s: %w", name, err)
	}
	if len(b) == 0 {
		return nil, "", fmt.Errorf("tls: %s is empty", name)
	}
	return b, name, nil
}
