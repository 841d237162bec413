package simulator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tflo-io/tflo/internal/worker"
)

// MainConfig is the simulator process's configuration
// (workers/cmd/simulator): the fleet and the broker it publishes to.
type MainConfig struct {
	Config `yaml:",inline"`

	MQTT MQTTConfig `json:"mqtt" yaml:"mqtt"`

	Metrics worker.MetricsConfig `json:"metrics" yaml:"metrics"`
	Log     worker.LogConfig     `json:"log" yaml:"log"`
}

// MQTTConfig is the broker the simulator publishes to.
type MQTTConfig struct {
	// URL of the broker (mqtt://host:port). Required.
	URL string `json:"url" yaml:"url"`
	// ClientID (default "tflo-simulator").
	ClientID string `json:"client_id" yaml:"client_id"`
	// Username and PasswordEnv (the variable holding the password), when
	// the broker requires a login.
	Username    string `json:"username" yaml:"username"`
	PasswordEnv string `json:"password_env" yaml:"password_env"`
}

// ApplyDefaults fills in the fleet's defaults (Config.WithDefaults) after
// the file and the environment, so --print-config prints what runs.
func (c *MainConfig) ApplyDefaults() {
	c.Config = c.Config.WithDefaults()
	if c.MQTT.ClientID == "" {
		c.MQTT.ClientID = defaultClientID
	}
	c.Log.ApplyDefaults()
}

// Logging implements worker.Config.
func (c *MainConfig) Logging() worker.LogConfig { return c.Log }

// MetricsAddr implements worker.Config.
func (c *MainConfig) MetricsAddr() string { return c.Metrics.Addr }

// Validate reports every problem, as sentences.
func (c MainConfig) Validate() error {
	var errs []error
	if c.MQTT.URL == "" {
		errs = append(errs, errors.New("simulator config: mqtt.url is empty"))
	} else if _, err := parseBrokerURL(c.MQTT.URL); err != nil {
		// Here, not only when dialling: a URL autopaho cannot dial is a
		// usage error (exit code 2, --print-config), not a run that fails
		// or retries it for ever.
		errs = append(errs, fmt.Errorf("simulator config: mqtt.url: %w", err))
	}
	if err := c.Config.WithDefaults().Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Metrics.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("simulator config: %w", err))
	}
	if err := c.Log.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("simulator config: %w", err))
	}
	return errors.Join(errs...)
}

// Process is the fleet with its MQTT connection: the simulator process.
type Process struct {
	cfg MainConfig
	sim *Simulator
	log *slog.Logger
	pub atomic.Pointer[MQTTPublisher] // set once connected
}

// NewProcess validates cfg and registers the fleet's metrics with reg
// (may be nil).
func NewProcess(cfg MainConfig, log *slog.Logger, reg prometheus.Registerer) (*Process, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	// Checked here, not by Validate: --print-config works without the
	// secret.
	if v := cfg.MQTT.PasswordEnv; v != "" && os.Getenv(v) == "" {
		return nil, fmt.Errorf("simulator config: mqtt.password_env names %s, which is unset or empty", v)
	}
	sim, err := New(cfg.Config)
	if err != nil {
		return nil, err
	}
	s := &Process{cfg: cfg, sim: sim, log: log}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "tflo", Subsystem: "simulator", Name: name, Help: help}, f)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{
			counter("readings_total", "Well-formed readings published.", func() float64 { return float64(sim.Stats().Readings) }),
			counter("malformed_total", "Malformed payloads published.", func() float64 { return float64(sim.Stats().Malformed) }),
			counter("anomalies_total", "Anomaly episodes started.", func() float64 { return float64(sim.Stats().Anomalies) }),
		} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("simulator: metrics: %w", err)
			}
		}
	}
	return s, nil
}

// Ready reports nil while the process is connected to its broker, else
// what is missing: the /readyz check of the simulator's main.
func (s *Process) Ready(context.Context) error {
	pub := s.pub.Load()
	if pub == nil {
		return fmt.Errorf("simulator: not connected to broker %s yet", s.cfg.MQTT.URL)
	}
	return pub.Connected()
}

// Stats returns what the fleet published so far.
func (s *Process) Stats() Stats { return s.sim.Stats() }

// Run connects to the broker and publishes until the configured rounds
// are done (nil) or ctx ends (nil: a requested stop). tee, when not nil,
// sees every payload after the broker acknowledged it.
func (s *Process) Run(ctx context.Context, tee Publisher) error {
	pub, err := DialMQTT(ctx, MQTTOptions{URL: s.cfg.MQTT.URL, ClientID: s.cfg.MQTT.ClientID,
		Username: s.cfg.MQTT.Username, Password: os.Getenv(s.cfg.MQTT.PasswordEnv), Log: s.log})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	s.pub.Store(pub)
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = pub.Close(dctx)
	}()
	var p Publisher = pub
	if tee != nil {
		p = PublisherFunc(func(ctx context.Context, topic string, payload []byte) error {
			if err := pub.Publish(ctx, topic, payload); err != nil {
				return err
			}
			return tee.Publish(ctx, topic, payload)
		})
	}
	cfg := s.cfg.WithDefaults()
	s.log.Info("simulator running", "broker", s.cfg.MQTT.URL, "sensors", cfg.Sensors, "interval", cfg.Interval, "rounds", cfg.Rounds, "topic", cfg.Topic+"/<sensor>")
	err = s.sim.Run(ctx, p)
	st := s.sim.Stats()
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		err = nil // stopped, as asked
	}
	attrs := []any{"readings", st.Readings, "malformed", st.Malformed, "anomalies", st.Anomalies}
	if err != nil {
		attrs = append(attrs, "err", err) // the caller reports it
	}
	s.log.Info("simulator stopped", attrs...)
	return err
}
