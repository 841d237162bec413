package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tflo-io/tflo/internal/tlsconfig"
)

// Secret is a string that never prints: String, GoString and the %v family
// show "[redacted]", and JSON marshals it as "[redacted]", so a secret put
// in a config struct cannot leak into logs or error messages.
type Secret string

// String returns "[redacted]".
func (Secret) String() string { return "[redacted]" }

// GoString returns "[redacted]".
func (Secret) GoString() string { return "[redacted]" }

// MarshalJSON writes "[redacted]".
func (Secret) MarshalJSON() ([]byte, error) { return []byte(`"[redacted]"`), nil }

// Reveal returns the secret itself, for handing to the client library only.
func (s Secret) Reveal() string { return string(s) }

// SASL mechanisms.
const (
	MechanismPlain       = "PLAIN"
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismScramSHA512 = "SCRAM-SHA-512"
)

// SASLConfig is SASL authentication.
type SASLConfig struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512.
	Mechanism string `json:"mechanism" yaml:"mechanism"`
	// Username is the SASL user name.
	Username string `json:"username" yaml:"username"`
	// PasswordEnv names the environment variable holding the password:
	// a config file or a spec names the variable, never the password.
	PasswordEnv string `json:"password_env,omitempty" yaml:"password_env"`
	// Password is the password given from code (tests, embedders);
	// it wins over PasswordEnv. No file sets it.
	Password Secret `json:"-" yaml:"-"`
}

// password returns the password: Password, else the variable
// PasswordEnv names. Its errors name the variable, never a value.
func (c *SASLConfig) password() (string, error) {
	if c.Password != "" {
		return c.Password.Reveal(), nil
	}
	if c.PasswordEnv == "" {
		return "", fmt.Errorf("kafka security: SASL user %q has no password: set password_env to the variable holding it", c.Username)
	}
	if v := os.Getenv(c.PasswordEnv); v != "" {
		return v, nil
	}
	return "", fmt.Errorf("kafka security: SASL password variable %s (password_env of user %q) is unset or empty", c.PasswordEnv, c.Username)
}

// TLSConfig is TLS to the brokers. PEM fields win over file fields.
type TLSConfig struct {
	// CAFile / CAPEM: the CA that signed the brokers' certificates; empty
	// means the system roots.
	CAFile string `json:"ca_file,omitempty" yaml:"ca_file,omitempty"`
	CAPEM  []byte `json:"-" yaml:"-"`
	// CertFile+KeyFile / CertPEM+KeyPEM: the client certificate (mTLS).
	CertFile string `json:"cert_file,omitempty" yaml:"cert_file,omitempty"`
	KeyFile  string `json:"key_file,omitempty" yaml:"key_file,omitempty"`
	CertPEM  []byte `json:"-" yaml:"-"`
	KeyPEM   Secret `json:"-" yaml:"-"`
	// ServerName overrides the name checked in the broker certificate.
	ServerName string `json:"server_name,omitempty" yaml:"server_name,omitempty"`
}

// Security is the transport security of a Source or Publisher. The zero
// value is plaintext without authentication.
type Security struct {
	TLS  *TLSConfig  `json:"tls,omitempty" yaml:"tls,omitempty"`
	SASL *SASLConfig `json:"sasl,omitempty" yaml:"sasl,omitempty"`
}

// Validate checks the settings; its errors never contain secrets.
func (s Security) Validate() error {
	if s.SASL != nil {
		switch strings.ToUpper(s.SASL.Mechanism) {
		case MechanismPlain, MechanismScramSHA256, MechanismScramSHA512:
		default:
			return fmt.Errorf("kafka security: SASL mechanism %q is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512", s.SASL.Mechanism)
		}
		if s.SASL.Username == "" {
			return errors.New("kafka security: SASL username is empty")
		}
		if _, err := s.SASL.password(); err != nil {
			return err
		}
	}
	if s.TLS != nil {
		if err := s.TLS.material().Validate(); err != nil {
			return fmt.Errorf("kafka security: %w", err)
		}
	}
	return nil
}

// kgoOpts turns s into client options.
func (s Security) kgoOpts() ([]kgo.Opt, error) { return s.kgoOptsWatched(nil) }

// kgoOptsWatched is kgoOpts with the SASL mechanism wrapped by watch when
// watch is not nil.
func (s Security) kgoOptsWatched(watch *saslWatch) ([]kgo.Opt, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	var opts []kgo.Opt
	if s.TLS != nil {
		tc, err := s.TLS.build()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if s.SASL != nil {
		m, err := s.saslMechanism()
		if err != nil {
			return nil, err
		}
		if watch != nil {
			watch.Mechanism = m
			m = watch
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

// saslWatch wraps a SASL mechanism to tell an authentication the broker
// rejected from a network failure: some brokers answer bad credentials
// with SASL_AUTHENTICATION_FAILED, others (and kfake) just close the
// connection mid-exchange, which reaches the client as EOF.
type saslWatch struct {
	sasl.Mechanism
	started, completed atomic.Int64
}

func (w *saslWatch) Authenticate(ctx context.Context, host string) (sasl.Session, []byte, error) {
	w.started.Add(1)
	sess, first, err := w.Mechanism.Authenticate(ctx, host)
	if err != nil {
		return nil, nil, err
	}
	return &saslWatchSession{Session: sess, w: w}, first, nil
}

type saslWatchSession struct {
	sasl.Session
	w *saslWatch
}

func (s *saslWatchSession) Challenge(b []byte) (bool, []byte, error) {
	done, out, err := s.Session.Challenge(b)
	if done && err == nil {
		s.w.completed.Add(1)
	}
	return done, out, err
}

// rejectedMidAuth reports whether an authentication began and none ever
// completed: the broker hung up on our credentials.
func (w *saslWatch) rejectedMidAuth() bool {
	return w != nil && w.started.Load() > 0 && w.completed.Load() == 0
}

func (s Security) saslMechanism() (sasl.Mechanism, error) {
	user := s.SASL.Username
	pass, err := s.SASL.password()
	if err != nil {
		return nil, err
	}
	switch strings.ToUpper(s.SASL.Mechanism) {
	case MechanismPlain:
		return plain.Auth{User: user, Pass: pass}.AsMechanism(), nil
	case MechanismScramSHA256:
		return scram.Auth{User: user, Pass: pass}.AsSha256Mechanism(), nil
	case MechanismScramSHA512:
		return scram.Auth{User: user, Pass: pass}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("kafka security: SASL mechanism %q is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512", s.SASL.Mechanism)
}

func (t *TLSConfig) build() (*tls.Config, error) {
	tc, err := t.material().Build()
	if err != nil {
		return nil, fmt.Errorf("kafka security: %w", err)
	}
	return tc, nil
}

// material is t as the project's one PEM → tls.Config builder takes it.
func (t *TLSConfig) material() tlsconfig.Config {
	return tlsconfig.Config{
		CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile, ServerName: t.ServerName,
		CAPEM: t.CAPEM, CertPEM: t.CertPEM, KeyPEM: []byte(t.KeyPEM.Reveal()),
	}
}

// isAuthError reports whether err is the broker refusing our credentials.
func isAuthError(err error) bool {
	return errors.Is(err, kerr.SaslAuthenticationFailed) ||
		errors.Is(err, kerr.IllegalSaslState) ||
		errors.Is(err, kerr.UnsupportedSaslMechanism) ||
		errors.Is(err, kerr.ClusterAuthorizationFailed)
}

// checkConnect makes one metadata round trip with a short-lived client to
// fail fast — once, with a clear error — on wrong credentials or an
// unreachable cluster, before a long-lived client starts retrying.
func checkConnect(ctx context.Context, brokers []string, extra []kgo.Opt, who string, sec Security) error {
	watch := &saslWatch{}
	secOpts, err := sec.kgoOptsWatched(watch)
	if err != nil {
		return err
	}
	opts := append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, secOpts...)
	opts = append(opts, extra...)
	opts = append(opts, kgo.RequestRetries(0))
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return fmt.Errorf("%s: %w", who, err)
	}
	defer cl.Close()
	if err := cl.Ping(ctx); err != nil {
		if isAuthError(err) || (watch.rejectedMidAuth() && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF))) {
			user, mech := "", ""
			if sec.SASL != nil {
				user, mech = sec.SASL.Username, sec.SASL.Mechanism
			}
			return fmt.Errorf("%s: broker refused %s credentials of user %q: %w", who, mech, user, ErrAuthentication)
		}
		return fmt.Errorf("%s: connect: %w", who, err)
	}
	return nil
}
