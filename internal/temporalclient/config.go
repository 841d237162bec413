package temporalclient

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/log"

	"github.com/tflo-io/tflo/internal/tlsconfig"
)

// Config is how to reach Temporal.
type Config struct {
	// Address is host:port of the frontend (default 127.0.0.1:7233).
	Address string `json:"address" yaml:"address"`
	// Namespace (default "default").
	Namespace string `json:"namespace" yaml:"namespace"`
	// TLSCA is a PEM file of CAs to trust instead of the system pool.
	TLSCA string `json:"tls_ca,omitempty" yaml:"tls_ca,omitempty"`
	// TLSCert and TLSKey are PEM files of a client certificate (mTLS).
	TLSCert string `json:"tls_cert,omitempty" yaml:"tls_cert,omitempty"`
	TLSKey  string `json:"tls_key,omitempty" yaml:"tls_key,omitempty"`
	// TLSServerName overrides the name checked in the server certificate.
	TLSServerName string `json:"tls_server_name,omitempty" yaml:"tls_server_name,omitempty"`
	// TLS turns TLS on without other TLS settings (system CAs).
	TLS bool `json:"tls,omitempty" yaml:"tls,omitempty"`
	// APIKey authenticates to Temporal Cloud (implies TLS).
	APIKey string `json:"api_key,omitempty" yaml:"api_key,omitempty"`
}

// Environment variables read by FromEnv, the ones the Temporal CLI uses.
const (
	EnvAddress    = "TEMPORAL_ADDRESS"
	EnvNamespace  = "TEMPORAL_NAMESPACE"
	EnvTLSCA      = "TEMPORAL_TLS_CA"
	EnvTLSCert    = "TEMPORAL_TLS_CERT"
	EnvTLSKey     = "TEMPORAL_TLS_KEY"
	EnvTLSServer  = "TEMPORAL_TLS_SERVER_NAME"
	EnvAPIKey     = "TEMPORAL_API_KEY"
	DefaultAddr   = "127.0.0.1:7233"
	DefaultNSName = "default"
)

// FromEnv returns c with every field that is empty in c taken from the
// environment.
func (c Config) FromEnv() Config {
	set := func(dst *string, env string) {
		if *dst == "" {
			*dst = os.Getenv(env)
		}
	}
	set(&c.Address, EnvAddress)
	set(&c.Namespace, EnvNamespace)
	set(&c.TLSCA, EnvTLSCA)
	set(&c.TLSCert, EnvTLSCert)
	set(&c.TLSKey, EnvTLSKey)
	set(&c.TLSServerName, EnvTLSServer)
	set(&c.APIKey, EnvAPIKey)
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
	if (c.TLSCert == "") != (c.TLSKey == "") {
		return errors.New("temporal TLS: a client certificate needs both tls_cert and tls_key")
	}
	for _, f := range []struct{ name, path string }{{"tls_ca", c.TLSCA}, {"tls_cert", c.TLSCert}, {"tls_key", c.TLSKey}} {
		if f.path == "" {
			continue
		}
		if _, err := os.Stat(f.path); err != nil {
			return fmt.Errorf("temporal TLS: %s file %q: %v", f.name, f.path, errors.Unwrap(err))
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

func (c Config) usesTLS() bool {
	return c.TLS || c.TLSCA != "" || c.TLSCert != "" || c.APIKey != ""
}

// TLSConfig builds the TLS settings, or nil for plaintext.
func (c Config) TLSConfig() (*tls.Config, error) {
	if !c.usesTLS() {
		return nil, nil
	}
	tc, err := tlsconfig.Config{
		CAFile: c.TLSCA, CertFile: c.TLSCert, KeyFile: c.TLSKey, ServerName: c.TLSServerName,
		Keys: tlsconfig.Keys{CA: "tls_ca", Cert: "tls_cert", Key: "tls_key"},
	}.Build()
	if err != nil {
		return nil, fmt.Errorf("temporal %w", err)
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
