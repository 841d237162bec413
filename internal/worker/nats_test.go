package worker

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/envconfig"
	"github.com/tflo-io/tflo/internal/tlsconfig"
	"github.com/tflo-io/tflo/testsuite/tlstest"
)

// startNATS runs an in-process JetStream nats-server with opts laid over
// the test defaults.
func startNATS(t *testing.T, opts natsserver.Options) *natsserver.Server {
	t.Helper()
	opts.Host, opts.Port, opts.JetStream, opts.StoreDir, opts.NoLog, opts.NoSigs = "127.0.0.1", -1, true, t.TempDir(), os.Getenv("NATSDEBUG") == "", true
	srv, err := natsserver.NewServer(&opts)
	require.NoError(t, err)
	if !opts.NoLog {
		srv.ConfigureLogger()
	}
	go srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second))
	t.Cleanup(srv.Shutdown)
	return srv
}

// TestNATSOverTLS is issue 17.10: the worker had no NATS TLS option, so a
// coordination store behind a private CA requiring client certificates
// was out of reach. coordination.nats_tls reaches it; without it the
// connection is refused.
func TestNATSOverTLS(t *testing.T) {
	pki := tlstest.New(t)
	srv := startNATS(t, natsserver.Options{TLSConfig: pki.ServerConfig(), TLSVerify: true, TLSTimeout: 5})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := CoordinationConfig{NATSURL: srv.ClientURL(), Job: "tls", LeaseTTL: 2 * time.Second,
		NATSTLS: &tlsconfig.Config{CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}}
	kv, closeNATS, err := openNATS(ctx, cc, "w1", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NotNil(t, kv)
	closeNATS()

	cc.NATSTLS = &tlsconfig.Config{CAFile: pki.CAFile} // no client certificate
	_, _, err = openNATS(ctx, cc, "w1", slog.New(slog.DiscardHandler))
	require.Error(t, err)
	cc.NATSTLS = &tlsconfig.Config{CAFile: "/nonexistent/ca.pem"}
	_, _, err = openNATS(ctx, cc, "w1", slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, `coordination.nats_tls: tls: ca_file "/nonexistent/ca.pem": no such file or directory`)
}

// TestNATSErrorsRedactTheURL is issue 17.10: NATS credentials could only
// go in the URL, and errors printed the URL with its password.
func TestNATSErrorsRedactTheURL(t *testing.T) {
	srv := startNATS(t, natsserver.Options{Username: "svc", Password: "right-one"})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	url := "nats://svc:hunter2-secret@" + srv.Addr().String()
	_, _, err := openNATS(ctx, CoordinationConfig{NATSURL: url, Job: "redact", LeaseTTL: 2 * time.Second}, "w1", slog.New(slog.DiscardHandler))
	require.Error(t, err)
	require.NotContains(t, err.Error(), "hunter2-secret")
	require.Contains(t, err.Error(), "nats://svc:xxxxx@"+srv.Addr().String())

	require.Equal(t, "nats://u:xxxxx@a:4222, nats://b:4222,(unparsable URL)", envconfig.RedactURLs("nats://u:p@a:4222, nats://b:4222,nats://x:%zz@c"))
	// A password whose part before a '/' is all digits parses as a port;
	// the worker's own redaction (url.URL.Redacted) showed it.
	require.Equal(t, "nats://u:xxxxx@a:4222", envconfig.RedactURLs("nats://u:1234/x@a:4222"))
}

// TestNATSCredentialsFile is issue 17.10: NATS credentials could only go
// in the URL. coordination.nats_creds_file authenticates with a user JWT
// and NKey seed against a server in operator mode; without it the server
// refuses the worker.
func TestNATSCredentialsFile(t *testing.T) {
	okp, err := nkeys.CreateOperator()
	require.NoError(t, err)
	opub, err := okp.PublicKey()
	require.NoError(t, err)
	account := func() (nkeys.KeyPair, string, *jwt.AccountClaims) {
		kp, err := nkeys.CreateAccount()
		require.NoError(t, err)
		pub, err := kp.PublicKey()
		require.NoError(t, err)
		return kp, pub, jwt.NewAccountClaims(pub)
	}
	_, syspub, sysc := account()
	sysjwt, err := sysc.Encode(okp)
	require.NoError(t, err)
	oc := jwt.NewOperatorClaims(opub)
	oc.SystemAccount = syspub
	ojwt, err := oc.Encode(okp)
	require.NoError(t, err)
	op, err := jwt.DecodeOperatorClaims(ojwt)
	require.NoError(t, err)

	akp, apub, ac := account()
	ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
	ajwt, err := ac.Encode(okp)
	require.NoError(t, err)

	ukp, err := nkeys.CreateUser()
	require.NoError(t, err)
	upub, err := ukp.PublicKey()
	require.NoError(t, err)
	uc := jwt.NewUserClaims(upub)
	uc.IssuerAccount = apub
	ujwt, err := uc.Encode(akp)
	require.NoError(t, err)
	useed, err := ukp.Seed()
	require.NoError(t, err)
	creds, err := jwt.FormatUserConfig(ujwt, useed)
	require.NoError(t, err)
	credsFile := filepath.Join(t.TempDir(), "worker.creds")
	require.NoError(t, os.WriteFile(credsFile, creds, 0o600))

	resolver := &natsserver.MemAccResolver{}
	require.NoError(t, resolver.Store(apub, ajwt))
	require.NoError(t, resolver.Store(syspub, sysjwt))
	srv := startNATS(t, natsserver.Options{TrustedOperators: []*jwt.OperatorClaims{op}, AccountResolver: resolver, SystemAccount: syspub})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cc := CoordinationConfig{NATSURL: srv.ClientURL(), Job: "creds", LeaseTTL: 2 * time.Second, NATSCredsFile: credsFile}
	kv, closeNATS, err := openNATS(ctx, cc, "w1", slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NotNil(t, kv)
	closeNATS()

	cc.NATSCredsFile = ""
	_, _, err = openNATS(ctx, cc, "w1", slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "Authorization Violation")
	cc.NATSCredsFile = "/nonexistent/worker.creds"
	_, _, err = openNATS(ctx, cc, "w1", slog.New(slog.DiscardHandler))
	require.ErrorContains(t, err, "coordination.nats_creds_file: stat /nonexistent/worker.creds: no such file or directory")
}
