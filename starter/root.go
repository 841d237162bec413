package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/tflo-io/tflo/internal/temporalclient"
	"github.com/tflo-io/tflo/internal/version"
	"github.com/tflo-io/tflo/workflows"
)

func init() {
	// The root's PersistentPreRunE (output format, connection flags) runs
	// even under a command that has its own.
	cobra.EnableTraverseRunHooks = true
}

// app holds what every command shares: output streams, global flags and a
// lazily dialed Temporal client.
type app struct {
	out, errOut io.Writer
	temporal    temporalclient.Config
	format      outputFormat
	verbose     bool
	client      client.Client
	// namespace is the one the client was dialed to, for error messages.
	namespace string
}

// Annotation keys a command can set.
const (
	// annotationTextOnly marks a command whose output is for people only:
	// -o json|yaml and --json are refused and hidden from its help.
	annotationTextOnly = "tflo/text-only"
)

const rootLong = `starter is the tflo CLI.

It talks to any Temporal: the local dev server "starter demo" starts, a
self-hosted cluster or a cloud namespace. It finds it as the Temporal CLI
does, with the same flags, variables and config file: each setting is taken
from its flag, else its TEMPORAL_* variable (TEMPORAL_ADDRESS,
TEMPORAL_NAMESPACE, TEMPORAL_TLS, TEMPORAL_TLS_CLIENT_CERT_PATH,
TEMPORAL_TLS_CLIENT_KEY_PATH, TEMPORAL_TLS_SERVER_CA_CERT_PATH,
TEMPORAL_TLS_SERVER_NAME, TEMPORAL_API_KEY), else the profile of the
Temporal CLI config file (--profile, --config-file), else the default
(127.0.0.1:7233, namespace "default"). The API key is never a flag value,
which every user of the machine could read in the process list: use
TEMPORAL_API_KEY, --api-key-file or a profile.

Output: -o table (default), json or yaml; --json is -o json. Durations
print as strings ("1.2s"), times in RFC 3339, and a listing that finds
nothing prints an empty table, or [] under json.

Exit codes:
  0    success, including a listing that finds nothing
  1    failure (Temporal unreachable, a backfill that failed, ...)
  2    bad usage: unknown command or flag, extra argument, invalid value
  3    a named object does not exist (each command's help says which)
  130  interrupted (Ctrl-C)`

func newRootCommand(out, errOut io.Writer) *cobra.Command {
	root, _ := newRoot(out, errOut)
	return root
}

// newRoot returns the command tree and the app its commands share, whose
// client the caller closes (app.close) once the command has run.
func newRoot(out, errOut io.Writer) (*cobra.Command, *app) {
	a := &app{out: out, errOut: errOut, format: formatTable}
	var jsonAlias, tlsFlag bool
	var apiKey string
	root := &cobra.Command{
		Use:           "starter",
		Short:         "Run the iot-portal demo and drive tflo pipelines, checkpoints and backfills on Temporal",
		Long:          rootLong,
		Version:       version.Get().Version,
		SilenceUsage:  true,
		SilenceErrors: true, // execute prints errors, once
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			if jsonAlias {
				if f.Changed("output") && a.format != formatJSON {
					return usagef("--json and -o %s disagree: give one", a.format)
				}
				a.format = formatJSON
			}
			if a.structured() && cmd.Annotations[annotationTextOnly] != "" {
				return usagef("%s prints for people only: -o %s is not supported", cmd.CommandPath(), a.format)
			}
			if f.Changed("api-key") {
				return usagef("--api-key would show the key in the process list: put it in TEMPORAL_API_KEY, a file named by --api-key-file, or a --profile")
			}
			if f.Changed("tls") {
				a.temporal.TLS, a.temporal.TLSDisabled = tlsFlag, !tlsFlag
			}
			return nil
		},
	}
	root.SetVersionTemplate(version.Get().Line("starter") + "\n")
	root.SetOut(out)
	root.SetErr(errOut)
	f := root.PersistentFlags()
	f.StringVar(&a.temporal.Address, "address", "", "Temporal frontend host:port (env "+temporalclient.EnvAddress+"; default "+temporalclient.DefaultAddr+")")
	f.StringVarP(&a.temporal.Namespace, "namespace", "n", "", "Temporal namespace (env "+temporalclient.EnvNamespace+"; default \"default\")")
	f.BoolVar(&tlsFlag, "tls", false, "use TLS with the system CAs (env "+temporalclient.EnvTLS+"); on by itself with an API key or any --tls-* setting, --tls=false turns it off")
	f.StringVar(&a.temporal.TLSCA, "tls-ca-path", "", "PEM file of the CAs that sign the server certificate (env "+temporalclient.EnvTLSCA+")")
	f.StringVar(&a.temporal.TLSCert, "tls-cert-path", "", "PEM client certificate for mutual TLS (env "+temporalclient.EnvTLSCert+")")
	f.StringVar(&a.temporal.TLSKey, "tls-key-path", "", "PEM client key for mutual TLS (env "+temporalclient.EnvTLSKey+")")
	f.StringVar(&a.temporal.TLSServerName, "tls-server-name", "", "server name to verify in its certificate (env "+temporalclient.EnvTLSServer+")")
	f.StringVar(&a.temporal.APIKeyFile, "api-key-file", "", "file holding the API key (or env "+temporalclient.EnvAPIKey+"); turns TLS on")
	f.StringVar(&apiKey, "api-key", "", "refused: the key would show in the process list")
	_ = f.MarkHidden("api-key")
	f.StringVar(&a.temporal.Profile, "profile", "", "profile of the Temporal CLI config file (env "+temporalclient.EnvProfile+"; default \"default\")")
	f.StringVar(&a.temporal.ConfigFile, "config-file", "", "Temporal CLI config file (env "+temporalclient.EnvConfigFile+"; default <user config dir>/temporalio/temporal.toml)")
	f.VarP(&a.format, "output", "o", "output format: table, json or yaml")
	f.BoolVar(&jsonAlias, "json", false, "same as -o json")
	f.BoolVarP(&a.verbose, "verbose", "v", false, "log more")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })

	root.AddCommand(a.pipelineCommand(), a.checkpointCommand(), a.backfillCommand(), a.archiveCommand(), a.workersCommand(), a.operatorsCommand(), a.demoCommand(), a.versionCommand())
	// Cobra adds its completion group only when the root executes, after
	// finishTree: add it now so that it follows the rules too ("completion
	// bogus" printed its help and exited 0).
	root.InitDefaultCompletionCmd()
	// Cobra's help command printed "Unknown help topic" to stdout and
	// exited 0 for a command that does not exist: keep it (its shell
	// completion) but make that the usage error an unknown command is.
	root.InitDefaultHelpCmd()
	for _, c := range root.Commands() {
		if c.Name() == "help" {
			c.Args = cobra.ArbitraryArgs
			c.Run = nil
			c.RunE = func(c *cobra.Command, args []string) error {
				cmd, rest, err := c.Root().Find(args)
				if err != nil || cmd == nil || len(rest) > 0 {
					return usagef("unknown help topic %q (starter --help lists the commands)", strings.Join(args, " "))
				}
				return cmd.Help()
			}
		}
	}
	finishTree(root)
	return root, a
}

// finishTree gives every command of the tree, including ones added
// later, the CLI's rules: a group (a command with subcommands) without a
// Run of its own prints its help, and an unknown subcommand is a usage
// error; a command that does not declare its arguments takes none; an
// argument error is a usage error; a text-only command hides -o and
// --json from its help.
func finishTree(cmd *cobra.Command) {
	if cmd.HasSubCommands() {
		if cmd.Run == nil && cmd.RunE == nil {
			cmd.RunE = func(c *cobra.Command, _ []string) error { return c.Help() }
		}
		if cmd.Args == nil {
			cmd.Args = unknownSubcommand
		}
		cmd.DisableFlagsInUseLine = true // "starter pipeline", not "starter pipeline [flags]"
		if cmd.SuggestionsMinimumDistance <= 0 {
			cmd.SuggestionsMinimumDistance = 2
		}
	}
	if cmd.Args == nil {
		cmd.Args = noArgs
	}
	args := cmd.Args
	cmd.Args = func(c *cobra.Command, a []string) error {
		if err := args(c, a); err != nil {
			if _, ok := err.(usageError); ok {
				return err
			}
			return usageError{err}
		}
		return nil
	}
	if cmd.Annotations[annotationTextOnly] != "" {
		help := cmd.HelpFunc()
		cmd.SetHelpFunc(func(c *cobra.Command, a []string) {
			var hidden []func()
			for _, name := range []string{"output", "json"} {
				if fl := c.Root().PersistentFlags().Lookup(name); fl != nil && !fl.Hidden {
					fl.Hidden = true
					hidden = append(hidden, func() { fl.Hidden = false })
				}
			}
			help(c, a)
			for _, undo := range hidden {
				undo()
			}
		})
	}
	for _, sub := range cmd.Commands() {
		finishTree(sub)
	}
}

// unknownSubcommand is a group's argument rule: any argument is a
// subcommand that does not exist.
func unknownSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	msg := fmt.Sprintf("unknown command %q for %q", args[0], cmd.CommandPath())
	if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", strings.Join(s, `" or "`))
	}
	return usageError{fmt.Errorf("%s", msg)}
}

// noArgs is the rule of a command that takes flags only.
func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usagef("%q takes no arguments, got %q (options are flags: see --help)", cmd.CommandPath(), args)
	}
	return nil
}

// dial returns the shared client, connecting on first use (ctx bounds the
// connecting: Ctrl-C stops it). A connection setting that is wrong (a file
// that does not exist, an address without a port) is a usage error; an
// unreachable Temporal a failure.
func (a *app) dial(ctx context.Context) (client.Client, error) {
	if a.client != nil {
		return a.client, nil
	}
	level := slog.LevelWarn
	if a.verbose {
		level = slog.LevelInfo
	}
	log := slog.New(slog.NewTextHandler(a.errOut, &slog.HandlerOptions{Level: level}))
	r, err := a.temporal.Resolve()
	if err != nil {
		return nil, usageError{err}
	}
	log.Info("connecting to temporal", "target", r.String(), "address_from", r.Source("address"), "namespace_from", r.Source("namespace"))
	c, err := r.DialContext(ctx, log)
	if err != nil {
		return nil, err
	}
	a.client, a.namespace = c, r.Namespace
	return c, nil
}

// searchAttributeHint says how to register tflo's search attributes when
// the server refused a call for lacking them; its own message ("column
// name 'TfloPipeline' is not a valid search attribute") does not.
func (a *app) searchAttributeHint(err error) string {
	var ia *serviceerror.InvalidArgument
	if !errors.As(err, &ia) {
		return ""
	}
	names := []string{workflows.SearchPipeline.GetName(), workflows.SearchBreakerState.GetName()}
	if !strings.Contains(ia.Error(), names[0]) && !strings.Contains(ia.Error(), names[1]) {
		return ""
	}
	return fmt.Sprintf(" (tflo's search attributes are not registered in namespace %q: temporal operator search-attribute create --namespace %s --name %s --type Keyword --name %s --type Keyword; see the README's Search attributes)",
		a.namespace, a.namespace, names[0], names[1])
}

// close closes the client if a command dialed it. execute calls it
// whatever the command returned: a PersistentPostRun runs only after a
// command that succeeded, so a failed one left the connection open.
func (a *app) close() {
	if a.client != nil {
		a.client.Close()
	}
}

func (a *app) versionCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of starter (as --version does)",
		RunE: func(*cobra.Command, []string) error {
			info := version.Get()
			return a.emit(info, func(w io.Writer) { fmt.Fprintln(w, info.Line("starter")) })
		},
	}
}

// quote makes a value safe inside a visibility query string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "\\'") + "'" }

func printf(w io.Writer, format string, args ...any) { fmt.Fprintf(w, format, args...) }
