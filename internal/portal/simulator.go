package portal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tflo-io/tflo/workers/simulator"
)

// SimulatorConfig is the sensor simulator's configuration: the fleet
// (workers/simulator's Config) and the broker it publishes to.
type SimulatorConfig struct {
	simulator.Config `yaml:",inline"`

	MQTT struct {
		// URL of the broker (mqtt://host:port). Required.
		URL string `json:"url" yaml:"url"`
		// ClientID (default "tflo-simulator").
		ClientID    string `json:"client_id" yaml:"client_id"`
		Username    string `json:"username" yaml:"username"`
		PasswordEnv string `json:"password_env" yaml:"password_env"`
	} `json:"mqtt" yaml:"mqtt"`

	Metrics MetricsConfig `json:"metrics" yaml:"metrics"`
	Log     LogConfig     `json:"log" yaml:"log"`
}

// Validate reports every problem, as sentences.
func (c SimulatorConfig) Validate() error {
	var errs []error
	if c.MQTT.URL == "" {
		errs = append(errs, errors.New("simulator config: mqtt.url is empty"))
	}
	if err := c.Config.WithDefaults().Validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Log.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("simulator config: %w", err))
	}
	return errors.Join(errs...)
}

// Simulator is the fleet with its MQTT connection.
type Simulator struct {
	cfg SimulatorConfig
	sim *simulator.Simulator
	log *slog.Logger
}

// NewSimulator validates cfg and registers the fleet's metrics with reg
// (may be nil).
func NewSimulator(cfg SimulatorConfig, log *slog.Logger, reg prometheus.Registerer) (*Simulator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	sim, err := simulator.New(cfg.Config)
	if err != nil {
		return nil, err
	}
	s := &Simulator{cfg: cfg, sim: sim, log: log}
	if err := register(reg,
		counterFunc("simulator", "readings_total", "Well-formed readings published.", func() float64 { return float64(sim.Stats().Readings) }),
		counterFunc("simulator", "malformed_total", "Malformed payloads published.", func() float64 { return float64(sim.Stats().Malformed) }),
		counterFunc("simulator", "anomalies_total", "Anomaly episodes started.", func() float64 { return float64(sim.Stats().Anomalies) }),
	); err != nil {
		return nil, fmt.Errorf("simulator: metrics: %w", err)
	}
	return s, nil
}

// Stats returns what the fleet published so far.
func (s *Simulator) Stats() simulator.Stats { return s.sim.Stats() }

// Run connects to the broker and publishes until the configured rounds
// are done (nil) or ctx ends (nil: a requested stop). tee, when not nil,
// sees every payload after the broker acknowledged it.
func (s *Simulator) Run(ctx context.Context, tee simulator.Publisher) error {
	pub, err := simulator.DialMQTT(ctx, simulator.MQTTOptions{URL: s.cfg.MQTT.URL, ClientID: s.cfg.MQTT.ClientID,
		Username: s.cfg.MQTT.Username, Password: os.Getenv(s.cfg.MQTT.PasswordEnv)})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = pub.Close(dctx)
	}()
	var p simulator.Publisher = pub
	if tee != nil {
		p = simulator.PublisherFunc(func(ctx context.Context, topic string, payload []byte) error {
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
	s.log.Info("simulator stopped", "readings", st.Readings, "malformed", st.Malformed, "anomalies", st.Anomalies, "err", err)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return nil
	}
	return err
}
