package temporalclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"
)

// Config is how to reach Temporal. Its keys are the official client
// configuration's (go.temporal.io/sdk/contrib/envconfig, the Temporal CLI
// and SDKs: address, namespace, api_key, tls.*), as YAML keys and as the
// TEMPORAL_* variables FromEnv reads.
type Config struct {
	// Address is host:port of the frontend (default 127.0.0.1:7233).
	Address string `json:"address" yaml:"address"`
	// Namespace (default "default").
	Namespace string `json:"namespace" yaml:"namespace"`
	// APIKey authenticates to Temporal Cloud (implies TLS). It is never
	// read from a file: set TEMPORAL_API_KEY, or name another variable in
	// APIKeyEnv.
	APIKey    string `json:"-" yaml:"-"`
	APIKeyEnv string `json:"api_key_env,omitempty" yaml:"api_key_env"`
	// TLS, when set, dials with TLS (unless Disabled).
	TLS *TLS `json:"tls,omitempty" yaml:"tls"`
}

// TLS is the connection's TLS, with the official key names.
type TLS struct {
	// Disabled turns TLS off even with an API key.
	Disabled bool `json:"disabled,omitempty" yaml:"disabled"`
	// ServerCACertPath is a PEM file of CAs to trust instead of the
	// system pool.
	ServerCACertPath string `json:"server_ca_cert_path,omitempty" yaml:"server_ca_cert_path"`
	// ClientCertPath and ClientKeyPath are PEM files of a client
	// certificate (mTLS).
	ClientCertPath string `json:"client_cert_path,omitempty" yaml:"client_cert_path"`
	ClientKeyPath  string `json:"client_key_path,omitempty" yaml:"client_key_path"`
	// ServerName overrides the name checked in the server certificate.
	ServerName string `json:"server_name,omitempty" yaml:"server_name"`
}

// Environment variables FromEnv reads: the official names, then the
// Temporal CLI's older ones.
const (
	EnvAddress       = "TEMPORAL_ADDRESS"
	EnvNamespace     = "TEMPORAL_NAMESPACE"
	EnvAPIKey        = "TEMPORAL_API_KEY"
	EnvTLS           = "TEMPORAL_TLS"
	EnvTLSServerCA   = "TEMPORAL_TLS_SERVER_CA_CERT_PATH"
	EnvTLSClientCert = "TEMPORAL_TLS_CLIENT_CERT_PATH"
	EnvTLSClientKey  = "TEMPORAL_TLS_CLIENT_KEY_PATH"
	EnvTLSServerName = "TEMPORAL_TLS_SERVER_NAME"
	DefaultAddr      = "127.0.0.1:7233"
	DefaultNSName    = "default"
)

// cliEnv are the Temporal CLI's older names of the TLS files.
var cliEnv = map[string]string{
	EnvTLSServerCA:   "TEMPORAL_TLS_CA",
	EnvTLSClientCert: "TEMPORAL_TLS_CERT",
	EnvTLSClientKey:  "TEMPORAL_TLS_KEY",
}

// FromEnv returns c with every field that is empty in c taken from the
// environment (the official TEMPORAL_* variables; for the TLS files also
// the Temporal CLI's older TEMPORAL_TLS_CA, _CERT and _KEY), and the API
// key from APIKeyEnv or TEMPORAL_API_KEY.
func (c Config) FromEnv() Config {
	get := func(name string) string {
		if v := os.Getenv(name); v != "" {
			return v
		}
		return os.Getenv(cliEnv[name])
	}
	set := func(dst *string, env string) {
		if *dst == "" {
			*dst = get(env)
		}
	}
	set(&c.Address, EnvAddress)
	set(&c.Namespace, EnvNamespace)
	if c.APIKey == "" && c.APIKeyEnv != "" {
		c.APIKey = os.Getenv(c.APIKeyEnv)
	}
	set(&c.APIKey, EnvAPIKey)
	var t TLS
	if c.TLS != nil {
		t = *c.TLS
	}
	set(&t.ServerCACertPath, EnvTLSServerCA)
	set(&t.ClientCertPath, EnvTLSClientCert)
	set(&t.ClientKeyPath, EnvTLSClientKey)
	set(&t.ServerName, EnvTLSServerName)
	on, onSet := false, false
	if v := os.Getenv(EnvTLS); v != "" {
		if b, err := strconv.ParseBool(v); err == nil {
			on, onSet = b, true
		}
	}
	if c.TLS != nil || t != (TLS{}) || onSet {
		if onSet && !on {
			t.Disabled = true
		}
		c.TLS = &t
	}
	return c
}

// WithDefaults fills the address and namespace defaults.
func (c Config) WithDefaults() Config {
	if c.Address == "" {
		c.Address = DefaultAddr
	}
	if c.Namespace == "" {
		c.Namespace = DefaultNSName
	}
	return c
}

// Validate reports the first problem, as a sentence.
func (c Config) Validate() error {
	if c.Address != "" {
		if _, _, err := net.SplitHostPort(c.Address); err != nil {
			return fmt.Errorf("temporal address %q: want host:port", c.Address)
		}
	}
	if c.TLS == nil {
		return nil
	}
	t := c.TLS
	if (t.ClientCertPath == "") != (t.ClientKeyPath == "") {
		return errors.New("temporal TLS: a client certificate needs both tls.client_cert_path and tls.client_key_path")
	}
	for _, f := range []struct{ name, path string }{{"server_ca_cert_path", t.ServerCACertPath}, {"client_cert_path", t.ClientCertPath}, {"client_key_path", t.ClientKeyPath}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("temporal TLS: tls.%s file %q: %v", f.name, f.path, errors.Unwrap(err))
		}
	}
	return nil
}

// String describes the target without secrets.
func (c Config) String() string {
	c = c.WithDefaults()
	s := c.Address + " namespace=" + c.Namespace
	if c.usesTLS() {
		s += " tls"
	}
	if c.APIKey != "" {
		s += " api-key=<redacted>"
	}
	return s
}

// usesTLS: TLS is on with a tls section or an API key, unless disabled.
func (c Config) usesTLS() bool {
	if c.TLS != nil && c.TLS.Disabled {
		return false
	}
	return c.TLS != nil || c.APIKey != ""
}

// TLSConfig builds the TLS settings, or nil for plaintext.
func (c Config) TLSConfig() (*tls.Config, error) {
	if !c.usesTLS() {
		return nil, nil
	}
	var t TLS
	if c.TLS != nil {
		t = *c.TLS
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.ServerCACertPath != "" {
		pem, err := os.ReadFile(t.ServerCACertPath)
		if err != nil {
			return nil, fmt.Errorf("temporal TLS: read tls.server_ca_cert_path %q: %w", t.ServerCACertPath, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("temporal TLS: tls.server_ca_cert_path %q holds no PEM certificate", t.ServerCACertPath)
		}
		tc.RootCAs = pool
	}
	if t.ClientCertPath != "" {
		cert, err := tls.LoadX509KeyPair(t.ClientCertPath, t.ClientKeyPath)
		if err != nil {
			return nil, fmt.Errorf("temporal TLS: load client certificate %q: %v", t.ClientCertPath, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// Options returns client options for c (defaults applied) logging to l
// (nil: warnings and errors to stderr).
func (c Config) Options(l *slog.Logger) (client.Options, error) {
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return client.Options{}, err
	}
	tc, err := c.TLSConfig()
	if err != nil {
		return client.Options{}, err
	}
	if l == nil {
		l = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	opts := client.Options{
		HostPort:  c.Address,
		Namespace: c.Namespace,
		Logger:    log.NewStructuredLogger(l),
	}
	opts.ConnectionOptions.TLS = tc
	if c.APIKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(c.APIKey)
	}
	return opts, nil
}

// Dial connects a client; the error names the address, never the key.
func (c Config) Dial(l *slog.Logger) (client.Client, error) {
	opts, err := c.Options(l)
	if err != nil {
		return nil, err
	}
	cl, err := client.Dial(opts)
	if err != nil {
		return nil, fmt.Errorf("connect to temporal at %s: %w", c.String(), err)
	}
	return cl, nil
}
