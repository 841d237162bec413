package worker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tflo-io/tflo/internal/envconfig"
	"github.com/tflo-io/tflo/internal/version"
)

// Config is what a main loads: a struct with yaml tags whose Log and
// Metrics sections it exposes.
type Config interface {
	Logging() LogConfig
	MetricsAddr() string
}

// Main is a main's description.
type Main struct {
	// Name of the command ("worker"), and Summary: what it does.
	Name, Summary string
	// Config is a pointer to the zero config the file and environment
	// fill (its ApplyDefaults and Validate run after them).
	Config Config
	// Flags adds the command's own flags (optional).
	Flags func(fs *flag.FlagSet)
	// Keys are more config types whose keys the help lists (a pipeline
	// spec), each with a heading.
	Keys []KeysOf
	// Run runs the worker until ctx ends (SIGINT/SIGTERM), then drains.
	Run func(ctx context.Context, rt Runtime) error
}

// Runtime is what RunMain gives a main's Run.
type Runtime struct {
	Log      *slog.Logger
	Registry prometheus.Registerer
	// Ready is what /readyz asks: Run sets its check once it has one.
	Ready *Readiness
}

// KeysOf is a config type whose keys a main's help lists.
type KeysOf struct {
	Heading string
	Zero    any
}

// Exit codes of the mains.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// RunMain parses args (--config FILE, the main's own flags, --version,
// --help), loads the config (the file, then TFLO_* variables, then
// defaults), validates it, starts the /metrics server (with
// tflo_build_info) when metrics.addr is set, and runs m until SIGINT or
// SIGTERM, after which the worker drains and takes its final checkpoint.
// It returns the process exit code.
func RunMain(m Main, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(m.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "YAML config file (optional: every key can also come from the environment)")
	if m.Flags != nil {
		m.Flags(fs)
	}
	pprofOn := fs.Bool("pprof", false, "also serve Go's profiles (net/http/pprof) at /debug/pprof/ on the metrics address")
	showVersion := version.Flag(fs)
	fs.Usage = func() { Usage(stderr, m, fs) }
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", m.Name, fs.Args())
		return ExitUsage
	}
	if *showVersion {
		fmt.Fprintln(os.Stdout, version.Get().Line(m.Name))
		return ExitOK
	}
	if err := envconfig.Load(*path, envconfig.Prefix, m.Config); err != nil {
		fmt.Fprintf(stderr, "%s: invalid configuration:\n%v\n", m.Name, err)
		return ExitUsage
	}
	log := m.Config.Logging().Logger(stderr).With("cmd", m.Name)
	reg := NewRegistry()
	ready := &Readiness{}
	if addr := m.Config.MetricsAddr(); addr != "" {
		opts := []ServeOption{WithReadiness(ready)}
		if *pprofOn {
			opts = append(opts, WithPprof())
		}
		ms, err := ServeMetrics(addr, reg, opts...)
		if err != nil {
			log.Error("metrics", "err", err)
			return ExitFailure
		}
		defer ms.Close()
		log.Info("metrics served", "url", ms.URL)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := m.Run(ctx, Runtime{Log: log, Registry: reg, Ready: ready}); err != nil {
		var usage usageError
		if errors.As(err, &usage) {
			fmt.Fprintf(stderr, "%s: %v\n", m.Name, usage.err)
			return ExitUsage
		}
		log.Error("stopped with an error", "err", err)
		return ExitFailure
	}
	return ExitOK
}

// usageError is a Run error caused by what the user gave (a spec that
// does not load): exit code 2.
type usageError struct{ err error }

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// Usage prints the command's help: what it does, its flags, the naming
// rule of the environment overrides and every variable its config
// accepts (generated from the config types, so it cannot drift).
func Usage(w io.Writer, m Main, fs *flag.FlagSet) {
	fmt.Fprintf(w, "%s — %s\n\nUsage:\n  %s [flags]\n\nFlags:\n", m.Name, m.Summary, m.Name)
	fs.PrintDefaults()
	fmt.Fprintf(w, `
Configuration: the YAML file (unknown keys are errors, named with their
line), then environment variables: TFLO_ + the key path upper-cased and
joined by "_" (for example log.level is TFLO_LOG_LEVEL; lists are
comma-separated, durations like 10s), then the defaults. ${NAME} and
${NAME:-default} in a file are replaced by environment variables. Secrets
are never keys: the *_env keys name the variable that holds them.
SIGINT/SIGTERM drain the worker and take a final checkpoint.
`)
	printKeys(w, "Keys", m.Config)
	for _, k := range m.Keys {
		printKeys(w, k.Heading, k.Zero)
	}
}

func printKeys(w io.Writer, heading string, zero any) {
	fmt.Fprintf(w, "\n%s:\n", heading)
	keys, err := envconfig.Keys(envconfig.Prefix, zero)
	if err != nil {
		fmt.Fprintf(w, "  (%v)\n", err)
		return
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	for _, k := range keys {
		typ := k.Type
		if i := strings.LastIndexByte(typ, '.'); i >= 0 && !strings.HasPrefix(typ, "[]") {
			typ = typ[i+1:]
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", k.Path, k.Env, typ)
	}
	tw.Flush()
}
