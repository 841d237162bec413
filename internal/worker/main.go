package worker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	neturl "net/url"
	"os"
	"os/signal"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/internal/envconfig"
	"github.com/tflo-io/tflo/internal/interrupt"
	"github.com/tflo-io/tflo/internal/version"
)

// Config is what a main loads: a struct with yaml tags whose Log and
// Metrics sections it exposes.
type Config interface {
	Logging() LogConfig
	MetricsAddr() string
}

// resolvedPrinter is a Config some of whose values settle only when the
// worker starts (the Temporal connection: keys left empty fall back to
// TEMPORAL_* variables and the Temporal CLI's profile). --print-config
// prints what they resolve to after the loaded values.
type resolvedPrinter interface {
	PrintResolved(w io.Writer, origins envconfig.Origins) error
}

// defaultNoter is a Config with keys whose default is left empty in the
// config and settles when the worker starts (worker_id: the host name).
// --print-config prints the note beside such a key's "default" origin,
// rather than a bare "" that the worker does not use.
type defaultNoter interface {
	DefaultNotes() map[string]string // key path -> what the default is
}

// Main is a main's description.
type Main struct {
	// Name of the command ("worker"), and Summary: what it does.
	Name, Summary string
	// Prefix of the command's environment variables (default
	// envconfig.Prefix, TFLO; the simulator's is SimulatorPrefix, so one
	// env file can hold both without collisions).
	Prefix string
	// Config is a pointer to the zero config the file and environment
	// fill (its ApplyDefaults and Validate run after them).
	Config Config
	// Flags adds the command's own flags (optional).
	Flags func(fs *flag.FlagSet)
	// CheckFlags, given the parsed flags, refuses those that do not go
	// together (optional): its error is a usage error (exit 2), printed
	// after the command's name.
	CheckFlags func(fs *flag.FlagSet) error
	// Keys are more config types whose keys the help lists (a pipeline
	// spec), each with a heading. Their variables count as known.
	Keys []KeysOf
	// PrintConfig prints what the main loads besides its config (the
	// pipeline spec) for --print-config (optional).
	PrintConfig func(w io.Writer) error
	// NamedVariables returns the variables that what the main loads
	// besides its config (the pipeline spec) names in its *_env keys:
	// one under the prefix holds a secret and is not refused as naming
	// no key (optional).
	NamedVariables func() []string
	// CheckSpec loads what the main loads besides its config (the
	// pipeline spec, and the program's edits of it) and returns its
	// problems, so that a config problem is reported together with them,
	// in one error, rather than the spec's only on the next run
	// (optional).
	CheckSpec func() error
	// Run runs the worker until ctx ends (SIGINT/SIGTERM), then drains.
	Run func(ctx context.Context, rt Runtime) error
	// Stopping is the help's sentence on what SIGINT/SIGTERM do (default
	// a pipeline worker's: drain and take a final checkpoint; the
	// simulator has no checkpoints).
	Stopping string
	// OneShot, asked once the flags are parsed, reports whether Run only
	// checks or lists and exits (--check): RunMain then serves no metrics,
	// so a check beside the running worker (docker compose exec) does not
	// fail on its port (optional).
	OneShot func() bool
	// OwnsProcess is set by a command's main (not by tests running the
	// main in their process): Run may then change process-wide settings,
	// such as the Go memory limit.
	OwnsProcess bool
}

// Runtime is what RunMain gives a main's Run.
type Runtime struct {
	Log      *slog.Logger
	Registry prometheus.Registerer
	// Ready is what /readyz asks: Run sets its check once it has one.
	Ready *Readiness
	// OwnsProcess is Main.OwnsProcess.
	OwnsProcess bool
}

// KeysOf is a config type whose keys a main's help lists.
type KeysOf struct {
	Heading string
	Zero    any
	// Defaults returns configs of Zero's type with their defaults applied
	// (several when the defaults depend on a choice, as a spec's source);
	// the help shows each key's first non-empty default. Optional.
	Defaults func() []any
}

// SimulatorPrefix is the simulator's variable prefix: TFLO_SIMULATOR_SENSORS
// cannot be taken for a worker key, and a worker ignores it.
const SimulatorPrefix = "TFLO_SIMULATOR"

// binaryPrefixes are the variable prefixes of tflo's binaries. A
// binary's unknown-variable check skips the variables of the others.
var binaryPrefixes = []string{envconfig.Prefix, SimulatorPrefix}

// sharedVariables are read under the TFLO_ prefix but are not config
// keys: the S3 settings of archive locations (internal/archiveloc) and
// the development tools' and test suite's switches (internal/devstack,
// testsuite, CONTRIBUTING.md), which a developer's shell may hold while a
// worker runs. A name ending in "_" covers every name it begins.
var sharedVariables = append(slices.Clone(archiveloc.EnvVariables),
	"TFLO_DEVSTACK_", "TFLO_CHAOS_", "TFLO_TEMPORAL", "TFLO_INFLUXD", "TFLO_VERSITYGW", "TFLO_MOSQUITTO", "TFLO_REQUIRE_SERVICES",
	"TFLO_WRITE_GOLDEN", "TFLO_RECORD_HISTORIES", "TFLO_HISTORY_RELEASE", "TFLO_LOAD_MINUTES",
	"TFLO_KEYEDSTATE_", "TFLO_TEST_", "TFLO_PIPELINE_TEST_", "TFLO_FILES_CRASH_DIR",
)

func (m Main) prefix() string {
	if m.Prefix == "" {
		return envconfig.Prefix
	}
	return m.Prefix
}

// checkEnvironment refuses a variable under the main's prefix that is no
// key of its config or of m.Keys (envconfig.Unknown), unless named is a
// variable a *_env key names.
func (m Main) checkEnvironment(environ, named []string) error {
	prefix := m.prefix()
	keys, err := envconfig.Keys(prefix, m.Config)
	if err != nil {
		return err
	}
	for _, k := range m.Keys {
		more, err := envconfig.Keys(prefix, k.Zero)
		if err != nil {
			return err
		}
		keys = append(keys, more...)
	}
	allowed := append(slices.Clone(sharedVariables), named...)
	for _, p := range binaryPrefixes {
		if p != prefix && strings.HasPrefix(p, prefix+"_") {
			allowed = append(allowed, p+"_")
		}
	}
	return envconfig.Unknown(prefix, environ, keys, allowed...)
}

// Exit codes of the mains.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
	// ExitInterrupted: a second SIGINT/SIGTERM while the worker drained
	// stopped it at once, without its clean stop.
	ExitInterrupted = 130
)

// RunMain parses args (--config FILE, the main's own flags, --version,
// --help), loads the config (the file, then TFLO_* variables, then
// defaults), validates it, starts the /metrics server (with
// tflo_build_info) when metrics.addr is set, and runs m until SIGINT or
// SIGTERM, after which the worker drains and takes its final checkpoint;
// a second signal while it drains exits at once (ExitInterrupted). It
// returns the process exit code.
func RunMain(m Main, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(m.Name, flag.ContinueOnError)
	path := fs.String("config", "", "YAML config file (optional: every key can also come from the environment)")
	if m.Flags != nil {
		m.Flags(fs)
	}
	// "(and spec)" only for a main that prints one (m.PrintConfig): the
	// simulator's help promised a spec it has not.
	what := "configuration"
	if m.PrintConfig != nil {
		what = "configuration (and spec)"
	}
	printConfig := fs.Bool("print-config", false, "print the effective "+what+" with each value's origin (default, FILE:LINE or env NAME), secrets redacted, and exit")
	probe := fs.String("probe", "", "GET this URL (the /readyz or /healthz this binary serves on its metrics address), exit 0 on 200 and 1 otherwise, and nothing else: a container health check for images without curl")
	pprofOn := fs.Bool("pprof", false, "also serve Go's profiles (net/http/pprof) at /debug/pprof/ on the metrics address")
	showVersion := version.Flag(fs)
	// The flag package prints a parse error and then the usage; the
	// usage (every key, a few hundred lines) buried the error, so a bad
	// flag prints the error and where the help is, as starter does.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr) // Usage's PrintDefaults writes there
			Usage(stderr, m, fs)
			return ExitOK
		}
		fmt.Fprintf(stderr, "%s: %v\nRun '%s --help' for usage.\n", m.Name, err, m.Name)
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "%s: unexpected arguments %q\n", m.Name, fs.Args())
		return ExitUsage
	}
	if m.CheckFlags != nil {
		if err := m.CheckFlags(fs); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", m.Name, err)
			return ExitUsage
		}
	}
	if *showVersion {
		fmt.Fprintln(os.Stdout, version.Get().Line(m.Name))
		return ExitOK
	}
	if *probe != "" {
		return runProbe(*probe, stderr)
	}
	origins, err := envconfig.LoadOrigins(*path, m.prefix(), m.Config)
	err = envconfig.FromFlag(err, "--config")
	named := envconfig.Named(m.Config) // the variables holding its secrets
	if m.NamedVariables != nil {
		named = append(named, m.NamedVariables()...)
	}
	// The archives' S3 keys (backfills, internal/archiveloc): those
	// variables are shared, not keys, but name the ones holding secrets.
	s3, s3Err := archiveloc.S3FromEnv(os.LookupEnv)
	for _, v := range []string{s3.AccessKeyEnv, s3.SecretKeyEnv} {
		if v != "" {
			named = append(named, v)
		}
	}
	envErr := m.checkEnvironment(os.Environ(), named)
	if err := errors.Join(err, envErr, s3Err); err != nil {
		if m.CheckSpec != nil {
			err = errors.Join(err, m.CheckSpec())
		}
		fmt.Fprintf(stderr, "%s: invalid configuration:\n%v\n", m.Name, err)
		return ExitUsage
	}
	if *printConfig {
		if dn, ok := m.Config.(defaultNoter); ok {
			for path, note := range dn.DefaultNotes() {
				if origins.Of(path) == "default" {
					origins[path] = "default: " + note
				}
			}
		}
		fmt.Fprintf(os.Stdout, "# %s configuration\n", m.Name)
		if err := envconfig.Print(os.Stdout, m.Config, origins); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", m.Name, err)
			return ExitFailure
		}
		if rp, ok := m.Config.(resolvedPrinter); ok {
			if err := rp.PrintResolved(os.Stdout, origins); err != nil {
				fmt.Fprintf(stderr, "%s: %v\n", m.Name, err)
				return ExitUsage
			}
		}
		if m.PrintConfig != nil {
			if err := m.PrintConfig(os.Stdout); err != nil {
				fmt.Fprintf(stderr, "%s: %v\n", m.Name, err)
				return ExitUsage
			}
		}
		return ExitOK
	}
	oneShot := m.OneShot != nil && m.OneShot()
	if *pprofOn && m.Config.MetricsAddr() == "" && !oneShot {
		fmt.Fprintf(stderr, "%s: --pprof serves the profiles on the metrics address: set metrics.addr (%s)\n", m.Name, envconfig.Name(m.prefix(), "metrics", "addr"))
		return ExitUsage
	}
	log := m.Config.Logging().Logger(stderr).With("cmd", m.Name)
	reg := NewRegistry()
	ready := &Readiness{}
	if addr := m.Config.MetricsAddr(); addr != "" && !oneShot {
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
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	ctx, stop := interruptContext(sigs, m.Name, stderr, os.Exit)
	defer stop()
	if err := m.Run(ctx, Runtime{Log: log, Registry: reg, Ready: ready, OwnsProcess: m.OwnsProcess}); err != nil {
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

// interruptContext returns a context the first signal on sigs cancels:
// the worker drains. A second signal while it drains gives that up: it
// says so on stderr and calls exit(ExitInterrupted), so a drain stuck on
// an unreachable sink can be ended from the terminal
// (signal.NotifyContext kept catching the signal, so a second Ctrl-C was
// ignored). stop releases the goroutine.
func interruptContext(sigs <-chan os.Signal, name string, stderr io.Writer, exit func(int)) (ctx context.Context, stop func()) {
	return interrupt.Context(context.Background(), sigs, func() {
		fmt.Fprintf(stderr, "%s: interrupted again while draining: stopping at once, without the final checkpoint\n", name)
		exit(ExitInterrupted)
	})
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
	p := m.prefix()
	stopping := m.Stopping
	if stopping == "" {
		stopping = "SIGINT/SIGTERM drain the worker and take a final checkpoint; a second\none while it drains stops it at once (exit 130), without it."
	}
	fmt.Fprintf(w, `
Configuration: the YAML file (unknown keys are errors, named with their
line), then environment variables: %[1]s_ + the key path upper-cased and
joined by "_" (for example log.level is %[1]s_LOG_LEVEL; lists are
comma-separated, durations like 10s); a variable set to "" clears its key,
so the default applies; a %[1]s_ variable that names no key (nor holds
a secret an *_env key names) is an error.
Then the defaults, which may derive from other keys. ${NAME} and
${NAME:-default} in a file are replaced by environment variables. Secrets
are never keys: the *_env keys name the variable that holds them.
--print-config shows the result and where each value came from.
%[2]s
`, p, stopping)
	var defaults func() []any
	if d, ok := m.Config.(envconfig.Defaulter); ok {
		defaults = func() []any {
			z := reflect.New(reflect.TypeOf(d).Elem()).Interface().(envconfig.Defaulter)
			z.ApplyDefaults()
			return []any{z}
		}
	}
	printKeys(w, p, KeysOf{Heading: "Keys (key, variable, type, default: description)", Zero: m.Config, Defaults: defaults})
	for _, k := range m.Keys {
		printKeys(w, p, k)
	}
}

// zeroTime is the text of the zero time.Time: no default (the
// simulator's start: the clock).
var zeroTime = time.Time{}.Format(time.RFC3339Nano)

func printKeys(w io.Writer, prefix string, of KeysOf) {
	fmt.Fprintf(w, "\n%s:\n", of.Heading)
	// With the keys no variable sets (a spec's decoder, sinks), each in
	// its place: left out, the help says nothing of them.
	keys, err := envconfig.AllKeys(prefix, of.Zero)
	if err != nil {
		fmt.Fprintf(w, "  (%v)\n", err)
		return
	}
	for i, k := range keys {
		if k.Env != "" {
			continue
		}
		keys[i].Env = "(file only)"
		if j := strings.LastIndexByte(k.Type, '.'); j >= 0 && strings.HasPrefix(k.Type, "[]") {
			keys[i].Type = "[]" + k.Type[j+1:] // []SinkEntry
		}
	}
	defaults := map[string]string{}
	if of.Defaults != nil {
		for _, d := range of.Defaults() {
			for _, s := range envconfig.Settings(d) {
				if _, seen := defaults[s.Path]; !seen && s.Value != `""` && s.Value != "[]" && s.Value != "0" && s.Value != "0s" && s.Value != "false" && s.Value != zeroTime {
					defaults[s.Path] = s.Value
				}
			}
		}
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	for _, k := range keys {
		typ := k.Type
		if i := strings.LastIndexByte(typ, '.'); i >= 0 && !strings.HasPrefix(typ, "[]") {
			typ = typ[i+1:]
		}
		line := k.Path + "\t" + k.Env + "\t" + typ
		if d, ok := defaults[k.Path]; ok {
			line += "\tdefault " + d
		} else {
			line += "\t"
		}
		if doc := keyDocs[k.Field]; doc != "" {
			line += "\t" + doc
		}
		fmt.Fprintf(tw, "  %s\n", line)
	}
	tw.Flush()
}

// probeTimeout is --probe's client timeout: above /readyz's own deadline
// (readyTimeout), within the compose file's health check timeout (6s).
const probeTimeout = 5 * time.Second

// runProbe GETs url and returns ExitOK on 200, ExitFailure otherwise
// (saying why on stderr).
func runProbe(url string, stderr io.Writer) int {
	// A URL without its scheme (127.0.0.1:9102/readyz) was refused in
	// net/url's words ("first path segment in URL cannot contain colon").
	// Still exit 1: a container runtime reserves a health check's 2.
	if u, err := neturl.Parse(url); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fmt.Fprintf(stderr, "probe %q: want an http:// or https:// URL of the metrics address, like http://127.0.0.1:9102/readyz\n", url)
		return ExitFailure
	}
	c := &http.Client{Timeout: probeTimeout}
	resp, err := c.Get(url)
	if err != nil {
		fmt.Fprintf(stderr, "probe %s: %v\n", url, err)
		return ExitFailure
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "probe %s: %s: %s\n", url, resp.Status, strings.TrimSpace(string(body)))
		return ExitFailure
	}
	return ExitOK
}
