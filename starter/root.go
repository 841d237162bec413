package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/tflo-io/tflo/internal/temporalclient"
)

// app holds what every command shares: output streams, global flags and a
// lazily dialed Temporal client.
type app struct {
	out, errOut io.Writer
	temporal    temporalclient.Config
	tls         temporalclient.TLS // the --tls-* flags
	tlsOn       bool               // --tls
	json        bool
	verbose     bool
	client      client.Client
}

func newRootCommand(out, errOut io.Writer) *cobra.Command {
	a := &app{out: out, errOut: errOut}
	root := &cobra.Command{
		Use:   "starter",
		Short: "Run the iot-portal demo and drive tflo pipelines, checkpoints and backfills on Temporal",
		Long: `starter is the tflo CLI.

It talks to any Temporal: the local dev server "starter demo" starts, a
self-hosted cluster, or a cloud namespace (--address, --namespace, --tls-*,
--api-key, or the TEMPORAL_* environment variables the Temporal CLI uses).

Exit codes: 0 success, 1 failure, 2 bad usage, 3 not found.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPostRun: func(*cobra.Command, []string) {
			if a.client != nil {
				a.client.Close()
			}
		},
	}
	root.SetOut(out)
	root.SetErr(errOut)
	f := root.PersistentFlags()
	f.StringVar(&a.temporal.Address, "address", "", "Temporal frontend host:port (env TEMPORAL_ADDRESS, default 127.0.0.1:7233)")
	f.StringVar(&a.temporal.Namespace, "namespace", "", "Temporal namespace (env TEMPORAL_NAMESPACE, default \"default\")")
	f.StringVar(&a.tls.ServerCACertPath, "tls-ca", "", "PEM file of CAs to trust (env TEMPORAL_TLS_SERVER_CA_CERT_PATH)")
	f.StringVar(&a.tls.ClientCertPath, "tls-cert", "", "PEM client certificate for mTLS (env TEMPORAL_TLS_CLIENT_CERT_PATH)")
	f.StringVar(&a.tls.ClientKeyPath, "tls-key", "", "PEM client key for mTLS (env TEMPORAL_TLS_CLIENT_KEY_PATH)")
	f.StringVar(&a.tls.ServerName, "tls-server-name", "", "server name to verify (env TEMPORAL_TLS_SERVER_NAME)")
	f.BoolVar(&a.tlsOn, "tls", false, "use TLS with the system CAs (env TEMPORAL_TLS)")
	f.StringVar(&a.temporal.APIKey, "api-key", "", "Temporal Cloud API key (env TEMPORAL_API_KEY; implies TLS)")
	f.BoolVar(&a.json, "json", false, "print machine-readable JSON")
	f.BoolVarP(&a.verbose, "verbose", "v", false, "log more")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	root.AddCommand(a.pipelineCommand(), a.checkpointCommand(), a.backfillCommand(), a.workersCommand(), a.operatorsCommand(), a.demoCommand())
	return root
}

// dial returns the shared client, connecting on first use.
func (a *app) dial() (client.Client, error) {
	if a.client != nil {
		return a.client, nil
	}
	level := slog.LevelWarn
	if a.verbose {
		level = slog.LevelInfo
	}
	cfg := a.temporal
	if a.tlsOn || a.tls != (temporalclient.TLS{}) {
		t := a.tls
		cfg.TLS = &t
	}
	cfg = cfg.FromEnv()
	if err := cfg.Validate(); err != nil {
		return nil, usageError{err}
	}
	c, err := cfg.Dial(slog.New(slog.NewTextHandler(a.errOut, &slog.HandlerOptions{Level: level})))
	if err != nil {
		return nil, err
	}
	a.client = c
	return c, nil
}

// emit prints v as JSON under --json, otherwise calls human.
func (a *app) emit(v any, human func(w io.Writer)) error {
	if a.json {
		enc := json.NewEncoder(a.out)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	human(a.out)
	return nil
}

// quote makes a value safe inside a visibility query string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "\\'") + "'" }

func printf(w io.Writer, format string, args ...any) { fmt.Fprintf(w, format, args...) }
