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
self-hosted cluster, or a cloud namespace, found as the Temporal CLI finds
it (--address, --namespace, --tls-*, --api-key-file, --profile and
--config-file, or the TEMPORAL_* environment variables).

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
	f.StringVar(&a.temporal.Address, "address", "", "Temporal frontend host:port (env "+temporalclient.EnvAddress+"; default "+temporalclient.DefaultAddr+")")
	f.StringVarP(&a.temporal.Namespace, "namespace", "n", "", "Temporal namespace (env "+temporalclient.EnvNamespace+"; default \"default\")")
	f.BoolVar(&a.temporal.TLS, "tls", false, "use TLS with the system CAs (env "+temporalclient.EnvTLS+")")
	f.StringVar(&a.temporal.TLSCA, "tls-ca-path", "", "PEM file of the CAs that sign the server certificate (env "+temporalclient.EnvTLSCA+")")
	f.StringVar(&a.temporal.TLSCert, "tls-cert-path", "", "PEM client certificate for mutual TLS (env "+temporalclient.EnvTLSCert+")")
	f.StringVar(&a.temporal.TLSKey, "tls-key-path", "", "PEM client key for mutual TLS (env "+temporalclient.EnvTLSKey+")")
	f.StringVar(&a.temporal.TLSServerName, "tls-server-name", "", "server name to verify in its certificate (env "+temporalclient.EnvTLSServer+")")
	f.StringVar(&a.temporal.APIKeyFile, "api-key-file", "", "file holding the API key (or env "+temporalclient.EnvAPIKey+"); turns TLS on")
	f.StringVar(&a.temporal.Profile, "profile", "", "profile of the Temporal CLI config file (env "+temporalclient.EnvProfile+")")
	f.StringVar(&a.temporal.ConfigFile, "config-file", "", "Temporal CLI config file (env "+temporalclient.EnvConfigFile+")")
	f.BoolVar(&a.json, "json", false, "print machine-readable JSON")
	f.BoolVarP(&a.verbose, "verbose", "v", false, "log more")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	root.AddCommand(a.pipelineCommand(), a.checkpointCommand(), a.backfillCommand(), a.workersCommand(), a.demoCommand())
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
	r, err := a.temporal.Resolve()
	if err != nil {
		return nil, usageError{err}
	}
	c, err := r.Dial(slog.New(slog.NewTextHandler(a.errOut, &slog.HandlerOptions{Level: level})))
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
