package worker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tflo-io/tflo/internal/version"
)

// LogConfig selects the slog output of a worker.
type LogConfig struct {
	// Level: debug, info (default), warn or error.
	Level string `json:"level" yaml:"level"`
	// Format: text (default) or json.
	Format string `json:"format" yaml:"format"`
}

// ApplyDefaults fills what the file and environment left empty, so
// --print-config shows the level and format the logger uses.
func (c *LogConfig) ApplyDefaults() {
	if c.Level == "" {
		c.Level = "info"
	}
	if c.Format == "" {
		c.Format = "text"
	}
}

// Validate reports an unknown level or format.
func (c LogConfig) Validate() error {
	var l slog.Level
	if c.Level != "" {
		if err := l.UnmarshalText([]byte(c.Level)); err != nil {
			return fmt.Errorf("log.level %q is not debug, info, warn or error", c.Level)
		}
	}
	if c.Format != "" && c.Format != "text" && c.Format != "json" {
		return fmt.Errorf("log.format %q is neither text nor json", c.Format)
	}
	return nil
}

// Logger returns a logger writing to w as configured.
func (c LogConfig) Logger(w io.Writer) *slog.Logger {
	var l slog.Level
	if c.Level != "" {
		_ = l.UnmarshalText([]byte(c.Level))
	}
	o := &slog.HandlerOptions{Level: l}
	if c.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

// MetricsConfig places the Prometheus endpoint.
type MetricsConfig struct {
	// Addr is the host:port /metrics listens on ("" disables it; ":0"
	// picks a free port).
	Addr string `json:"addr" yaml:"addr"`
}

// Validate refuses an address the listener cannot take, so a main's
// config check refuses it as bad usage, rather than the run failing on
// the listener once it started.
func (m MetricsConfig) Validate() error {
	if a := m.Addr; a != "" {
		_, port, err := net.SplitHostPort(a)
		if err != nil {
			return fmt.Errorf("metrics.addr %q: want host:port (\":0\" picks a free port): %v", a, err)
		}
		// A port out of range (":99999") or no service name splits
		// fine, and only the listener refused it.
		if _, err := net.LookupPort("tcp", port); err != nil {
			return fmt.Errorf("metrics.addr %q: port %q is not 0-65535 nor a service name (\":0\" picks a free port)", a, port)
		}
	}
	return nil
}

// NewRegistry returns a registry with the Go runtime and process
// collectors and tflo_build_info.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), version.Collector())
	return reg
}

// ServeOption adds to what a MetricsServer serves.
type ServeOption func(*serveConfig)

type serveConfig struct {
	ready *Readiness
	pprof bool
}

// WithReadiness makes /readyz answer 200 "ready" when r's check passes,
// else 503 with what is missing. Without it /readyz answers as /healthz.
func WithReadiness(r *Readiness) ServeOption { return func(c *serveConfig) { c.ready = r } }

// WithPprof serves net/http/pprof's profiles under /debug/pprof/ (off
// unless a main's --pprof asks: profiles show the process's internals).
func WithPprof() ServeOption { return func(c *serveConfig) { c.pprof = true } }

// readyTimeout bounds /readyz's check: below --probe's client timeout
// (probeTimeout), so a probe of a check that does not answer reports the
// 503 naming what it waited for, not its own timeout.
const readyTimeout = 4 * time.Second

// MetricsServer serves /metrics of a registry, /healthz (200 while the
// process serves HTTP at all) and /readyz (WithReadiness).
type MetricsServer struct {
	// URL is http://<addr>/metrics.
	URL string
	srv *http.Server
	ln  net.Listener
}

// ServeMetrics listens on addr and serves reg's metrics at /metrics,
// /healthz, /readyz and what opts add until Close.
func ServeMetrics(addr string, reg prometheus.Gatherer, opts ...ServeOption) (*MetricsServer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen on %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	var cfg serveConfig
	for _, o := range opts {
		o(&cfg)
	}
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, req *http.Request) {
		ctx, cancel := context.WithTimeout(req.Context(), readyTimeout)
		defer cancel()
		if err := cfg.ready.Check(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	if cfg.pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	s := &MetricsServer{srv: &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}, ln: ln}
	host := ln.Addr().String()
	if strings.HasPrefix(host, "[::]:") || strings.HasPrefix(host, "0.0.0.0:") {
		_, port, _ := net.SplitHostPort(host)
		host = net.JoinHostPort("127.0.0.1", port)
	}
	s.URL = "http://" + host + "/metrics"
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// Close stops the server.
func (s *MetricsServer) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := s.srv.Shutdown(ctx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
