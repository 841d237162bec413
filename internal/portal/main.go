package portal

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
	"github.com/tflo-io/tflo/workers/central"
)

// Config is what a worker main loads: one of EdgeConfig, CentralConfig,
// SimulatorConfig.
type Config interface {
	Validate() error
	logging() LogConfig
	metrics() MetricsConfig
}

func (c *EdgeConfig) logging() LogConfig          { return c.Log }
func (c *EdgeConfig) metrics() MetricsConfig      { return c.Metrics }
func (c *CentralConfig) logging() LogConfig       { return c.Log }
func (c *CentralConfig) metrics() MetricsConfig   { return c.Metrics }
func (c *SimulatorConfig) logging() LogConfig     { return c.Log }
func (c *SimulatorConfig) metrics() MetricsConfig { return c.Metrics }

// Main is a worker main's description.
type Main struct {
	// Name of the command ("tflo-edge"), and Summary: what it does.
	Name, Summary string
	// Config is a pointer to the zero config the file and environment fill.
	Config Config
	// Run runs the worker until ctx ends (SIGINT/SIGTERM), then drains.
	Run func(ctx context.Context, log *slog.Logger, reg prometheus.Registerer) error
}

// Exit codes of the worker mains.
const (
	ExitOK      = 0
	ExitFailure = 1
	ExitUsage   = 2
)

// RunMain parses args (--config FILE, --version, --help), loads the config (the
// file, then TFLO_* variables), validates it, starts the /metrics server
// when metrics.addr is set, and runs m until SIGINT or SIGTERM, after
// which the worker drains and takes its final checkpoint. It returns the
// process exit code.
func RunMain(m Main, args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet(m.Name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "YAML config file (optional: every key can also come from the environment)")
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
		fmt.Fprintf(stderr, "%s: %v\n", m.Name, err)
		return ExitUsage
	}
	if err := m.Config.Validate(); err != nil {
		fmt.Fprintf(stderr, "%s: invalid configuration:\n%v\n", m.Name, err)
		return ExitUsage
	}
	log := m.Config.logging().Logger(stderr).With("cmd", m.Name)
	reg := NewRegistry()
	if addr := m.Config.metrics().Addr; addr != "" {
		ms, err := ServeMetrics(addr, reg)
		if err != nil {
			log.Error("metrics", "err", err)
			return ExitFailure
		}
		defer ms.Close()
		log.Info("metrics served", "url", ms.URL)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := m.Run(ctx, log, reg); err != nil {
		log.Error("stopped with an error", "err", err)
		return ExitFailure
	}
	return ExitOK
}

// Usage prints the command's help: what it does, its flags, the naming
// rule of the environment overrides and every variable its config
// accepts (generated from the config type, so it cannot drift).
func Usage(w io.Writer, m Main, fs *flag.FlagSet) {
	fmt.Fprintf(w, "%s — %s\n\nUsage:\n  %s [--config FILE]\n\nFlags:\n", m.Name, m.Summary, m.Name)
	fs.PrintDefaults()
	fmt.Fprintf(w, `
Configuration: the YAML file (unknown keys are errors), then environment
variables: TFLO_ + the key path upper-cased and joined by "_" (for example
kafka.brokers is TFLO_KAFKA_BROKERS; lists are comma-separated, durations
like 10s). Secrets are never keys: the *_env keys name the variable that
holds them. SIGINT/SIGTERM drain the worker and take a final checkpoint.

Keys:
`)
	keys, err := envconfig.Keys(envconfig.Prefix, m.Config)
	if err != nil {
		fmt.Fprintf(w, "  (%v)\n", err)
		return
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	for _, k := range keys {
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", k.Path, k.Env, strings.TrimPrefix(k.Type, "central."))
	}
	tw.Flush()
}

// EdgeMain is workers/cmd/edge.
func EdgeMain() Main {
	cfg := &EdgeConfig{}
	return Main{
		Name:    "edge",
		Summary: "MQTT sensor readings → SMA/hysteresis/threshold-cross per sensor → Kafka signals",
		Config:  cfg,
		Run: func(ctx context.Context, log *slog.Logger, reg prometheus.Registerer) error {
			e, err := NewEdge(ctx, *cfg, log, reg)
			if err != nil {
				return err
			}
			return e.Run(ctx)
		},
	}
}

// CentralMain is workers/cmd/central.
func CentralMain() Main {
	cfg := &CentralConfig{Config: central.DefaultConfig()}
	return Main{
		Name:    "central",
		Summary: "Kafka signals → derived signals per sensor → InfluxDB + Parquet archive, checkpoints driven by Temporal",
		Config:  cfg,
		Run: func(ctx context.Context, log *slog.Logger, reg prometheus.Registerer) error {
			w, closeDurable, err := NewCentral(ctx, *cfg, log, reg)
			if err != nil {
				return err
			}
			defer closeDurable()
			stopBackfill, err := StartBackfill(ctx, *cfg, log)
			if err != nil {
				w.Close()
				return err
			}
			defer stopBackfill()
			return w.Run(ctx)
		},
	}
}

// SimulatorMain is workers/cmd/simulator.
func SimulatorMain() Main {
	cfg := &SimulatorConfig{}
	return Main{
		Name:    "simulator",
		Summary: "a seeded fleet of synthetic sensors publishing readings to MQTT",
		Config:  cfg,
		Run: func(ctx context.Context, log *slog.Logger, reg prometheus.Registerer) error {
			s, err := NewSimulator(*cfg, log, reg)
			if err != nil {
				return err
			}
			return s.Run(ctx, nil)
		},
	}
}
