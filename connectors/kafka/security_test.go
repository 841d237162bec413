package kafka

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"gopkg.in/yaml.v3"
)

// TestWrongSASLPassword: a wrong password is one clear error naming the
// user and mechanism, never the password, after a bounded number of
// authentication attempts — not a reconnect storm. The right password
// works against the same cluster.
func TestWrongSASLPassword(t *testing.T) {
	const goodPass, badPass = "s3cret-good-pw", "s3cret-WRONG-pw"
	for _, mech := range []string{MechanismPlain, MechanismScramSHA256, MechanismScramSHA512} {
		t.Run(mech, func(t *testing.T) {
			c := newCluster(t, 1, kfake.EnableSASL(), kfake.Superuser(mech, "svc", goodPass))
			var auths atomic.Int64 // one SASL handshake per connection attempt
			c.ControlKey(kmsg.SASLHandshake.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
				c.KeepControl()
				auths.Add(1)
				return nil, nil, false
			})
			addrs := c.ListenAddrs()
			sec := Security{SASL: &SASLConfig{Mechanism: mech, Username: "svc", Password: badPass}}

			src, err := NewSource(WithBrokers(addrs...), WithGroup("g"), WithTopics("readings"),
				WithPartitions(newLedger().as("m")), WithSecurity(sec))
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			start := time.Now()
			err = src.Run(ctx)
			require.ErrorIs(t, err, ErrAuthentication)
			require.NoError(t, ctx.Err(), "Run hung until the deadline instead of failing")
			require.Less(t, time.Since(start), 10*time.Second)
			require.NotContains(t, err.Error(), badPass)
			require.Contains(t, err.Error(), `"svc"`)
			require.Positive(t, auths.Load(), "no authentication reached the broker")
			require.LessOrEqual(t, auths.Load(), int64(3), "authentication attempts: a reconnect storm")
			t.Logf("error after %d attempts: %v", auths.Load(), err)

			_, err = NewPublisher(ctx, PublishTo("readings", addrs...), PublisherSecurity(sec))
			require.ErrorIs(t, err, ErrAuthentication)
			require.NotContains(t, err.Error(), badPass)

			good := Security{SASL: &SASLConfig{Mechanism: mech, Username: "svc", Password: goodPass}}
			pub, err := NewPublisher(ctx, PublishTo("readings", addrs...), PublisherSecurity(good))
			require.NoError(t, err)
			require.NoError(t, pub.Publish(ctx, "s-1", reading("s-1", 1)))
			require.NoError(t, pub.Flush(ctx))
			require.Equal(t, uint64(1), pub.Produced())
			pub.Close()
		})
	}
}

// TestSecretsNeverPrint: a Secret stays redacted through every formatting
// path a log line or error could take.
func TestSecretsNeverPrint(t *testing.T) {
	const pw = "hunter2-very-secret"
	sec := Security{SASL: &SASLConfig{Mechanism: MechanismPlain, Username: "u", Password: pw}}
	js, err := json.Marshal(sec)
	require.NoError(t, err)
	for _, s := range []string{
		fmt.Sprint(sec), fmt.Sprintf("%v", sec), fmt.Sprintf("%+v", sec), fmt.Sprintf("%#v", sec),
		fmt.Sprintf("%v", *sec.SASL), fmt.Sprintf("%+v", *sec.SASL), sec.SASL.Password.String(), fmt.Sprintf("%q", sec.SASL.Password), string(js),
	} {
		require.NotContains(t, s, pw)
	}
	require.Equal(t, pw, sec.SASL.Password.Reveal())
}

func TestSecurityValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		sec  Security
		want string
	}{
		{"unknown mechanism", Security{SASL: &SASLConfig{Mechanism: "GSSAPI", Username: "u"}}, "GSSAPI"},
		{"no user", Security{SASL: &SASLConfig{Mechanism: MechanismPlain}}, "username is empty"},
		{"no password", Security{SASL: &SASLConfig{Mechanism: MechanismPlain, Username: "u"}}, `SASL user "u" has no password: set password_env`},
		{"unset password variable", Security{SASL: &SASLConfig{Mechanism: MechanismPlain, Username: "u", PasswordEnv: "TFLO_TEST_UNSET_PW"}},
			`SASL password variable TFLO_TEST_UNSET_PW (password_env of user "u") is unset or empty`},
		{"cert without key", Security{TLS: &TLSConfig{CertFile: "c.pem"}}, "both cert_file and key_file"},
		{"bad CA", Security{TLS: &TLSConfig{CAPEM: []byte("nope")}}, "no PEM certificate"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.sec.kgoOpts()
			require.Error(t, err)
			require.True(t, strings.Contains(err.Error(), tc.want), "%v", err)
			require.False(t, errors.Is(err, ErrAuthentication))
		})
	}
}

// TestSASLPasswordFromEnv: the password of a config file was the YAML
// value itself (security.sasl.password); now the file names the variable
// holding it (password_env), and the client authenticates with the
// variable's value against a SASL cluster.
func TestSASLPasswordFromEnv(t *testing.T) {
	const pass = "pw-in-the-environment"
	c := newCluster(t, 1, kfake.EnableSASL(), kfake.Superuser(MechanismScramSHA512, "svc", pass))
	t.Setenv("TFLO_TEST_KAFKA_PW", pass)
	var sec Security
	require.NoError(t, yaml.Unmarshal([]byte("sasl: {mechanism: SCRAM-SHA-512, username: svc, password_env: TFLO_TEST_KAFKA_PW}"), &sec))
	require.Empty(t, sec.SASL.Password)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pub, err := NewPublisher(ctx, PublishTo("readings", c.ListenAddrs()...), PublisherSecurity(sec))
	require.NoError(t, err)
	require.NoError(t, pub.Publish(ctx, "s-1", reading("s-1", 1)))
	require.NoError(t, pub.Flush(ctx))
	pub.Close()

	t.Setenv("TFLO_TEST_KAFKA_PW", "wrong")
	_, err = NewPublisher(ctx, PublishTo("readings", c.ListenAddrs()...), PublisherSecurity(sec))
	require.ErrorIs(t, err, ErrAuthentication)
	require.NotContains(t, err.Error(), "wrong")
}
