package portal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/streaming"
	badgerstore "github.com/tflo-io/tflo/streaming/state/badger"
	"github.com/tflo-io/tflo/workers/edge"
)

// EdgeConfig is the edge gateway's configuration.
type EdgeConfig struct {
	// GatewayID names this gateway: its MQTT client id and its checkpoint
	// shard ("edge/<id>"). Default "edge-1"; unique per gateway.
	GatewayID string `json:"gateway_id" yaml:"gateway_id"`

	MQTT struct {
		// Servers are broker URLs, tried in order (mqtt://, tls://).
		// Required.
		Servers []string `json:"servers" yaml:"servers"`
		// Topics are the filters subscribed to (default "sensors/#").
		Topics []string `json:"topics" yaml:"topics"`
		// DLQTopic receives malformed payloads with the reason in a user
		// property (default "dlq/sensors"; must not match Topics).
		DLQTopic string `json:"dlq_topic" yaml:"dlq_topic"`
		// ReceiveMaximum is how many unacknowledged QoS 1/2 messages the
		// broker may have in flight to the gateway (default 4096; the QoS
		// 2 dedup window is kept at 4× this). Larger than the MQTT
		// library's 256 because the embedded broker (mochi-mqtt v2.7.9)
		// deadlocks once a subscriber's quota is exhausted: its
		// Inflight.NextImmediate read-locks twice.
		ReceiveMaximum uint16 `json:"receive_maximum" yaml:"receive_maximum"`
		// OmitReceiveMaximum leaves Receive Maximum out of CONNECT (no
		// broker-side flow control; the dedup window is still sized from
		// ReceiveMaximum). It avoids mochi-mqtt v2.7.9's deadlock outright:
		// without a receive maximum mochi never queues messages behind an
		// exhausted send quota, the only path that takes its in-flight
		// read lock twice. The embedded demo stack sets it.
		OmitReceiveMaximum bool `json:"omit_receive_maximum" yaml:"omit_receive_maximum"`
		// Username and PasswordEnv (the variable holding the password).
		Username    string `json:"username" yaml:"username"`
		PasswordEnv string `json:"password_env" yaml:"password_env"`
	} `json:"mqtt" yaml:"mqtt"`

	Kafka struct {
		Brokers []string `json:"brokers" yaml:"brokers"` // required
		// Topic the signals go to, keyed by sensor (default "signals").
		Topic string `json:"topic" yaml:"topic"`
	} `json:"kafka" yaml:"kafka"`

	Graph struct {
		// SMAWindow in readings (default 5).
		SMAWindow int `json:"sma_window" yaml:"sma_window"`
		// Low and High thresholds of the hysteresis (default 24 and 30).
		Low  float64 `json:"low" yaml:"low"`
		High float64 `json:"high" yaml:"high"`
		// DwellMS: a new mode must hold this long in event time (default 0).
		DwellMS int64 `json:"dwell_ms" yaml:"dwell_ms"`
	} `json:"graph" yaml:"graph"`

	State struct {
		// Dir is the Badger folder of checkpoints. Required.
		Dir string `json:"dir" yaml:"dir"`
	} `json:"state" yaml:"state"`

	Checkpoint struct {
		// Interval between checkpoints (default 10s).
		Interval time.Duration `json:"interval" yaml:"interval"`
	} `json:"checkpoint" yaml:"checkpoint"`

	Metrics MetricsConfig `json:"metrics" yaml:"metrics"`
	Log     LogConfig     `json:"log" yaml:"log"`
}

// WithDefaults fills the zero fields.
func (c EdgeConfig) WithDefaults() EdgeConfig {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	def(&c.GatewayID, "edge-1")
	if len(c.MQTT.Topics) == 0 {
		c.MQTT.Topics = []string{"sensors/#"}
	}
	def(&c.MQTT.DLQTopic, "dlq/sensors")
	if c.MQTT.ReceiveMaximum == 0 {
		c.MQTT.ReceiveMaximum = 4096
	}
	def(&c.Kafka.Topic, "signals")
	if c.Graph.SMAWindow == 0 {
		c.Graph.SMAWindow = 5
	}
	if c.Graph.Low == 0 && c.Graph.High == 0 {
		c.Graph.Low, c.Graph.High = 24, 30
	}
	if c.Checkpoint.Interval == 0 {
		c.Checkpoint.Interval = 10 * time.Second
	}
	return c
}

// Validate reports every problem (after defaults), as sentences.
func (c EdgeConfig) Validate() error {
	c = c.WithDefaults()
	var errs []error
	add := func(f string, a ...any) { errs = append(errs, fmt.Errorf("edge config: "+f, a...)) }
	if len(c.MQTT.Servers) == 0 {
		add("mqtt.servers is empty")
	}
	if len(c.Kafka.Brokers) == 0 {
		add("kafka.brokers is empty")
	}
	if c.State.Dir == "" {
		add("state.dir is empty: checkpoints need a Badger folder")
	}
	if c.Graph.Low >= c.Graph.High {
		add("graph thresholds low %g, high %g: want low < high", c.Graph.Low, c.Graph.High)
	}
	if c.Checkpoint.Interval < 0 {
		add("checkpoint.interval %s must not be negative", c.Checkpoint.Interval)
	}
	for _, t := range c.MQTT.Topics {
		if topicMatches(t, c.MQTT.DLQTopic) {
			add("mqtt.dlq_topic %q matches the subscription %q: dead letters would be read back", c.MQTT.DLQTopic, t)
		}
	}
	if err := c.Log.Validate(); err != nil {
		add("%v", err)
	}
	return errors.Join(errs...)
}

// topicMatches reports whether an MQTT topic filter matches topic.
func topicMatches(filter, topic string) bool {
	for {
		if filter == "#" {
			return true
		}
		fi, fr, fmore := cut(filter)
		ti, tr, tmore := cut(topic)
		if fi != "+" && fi != ti {
			return false
		}
		if !fmore || !tmore {
			return !fmore && !tmore || (fmore && fr == "#")
		}
		filter, topic = fr, tr
	}
}

func cut(s string) (head, rest string, more bool) {
	for i := range len(s) {
		if s[i] == '/' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

// Edge is a running-ready edge gateway.
type Edge struct {
	cfg   EdgeConfig
	src   *mqtt.Source
	pub   *kafka.Publisher
	store *badgerstore.Store
	p     *edge.Pipeline
	log   *slog.Logger

	closeOnce sync.Once
}

// EdgeStats are the gateway's counters.
type EdgeStats struct {
	edge.Stats
	Produced uint64 // signals acknowledged by Kafka
}

// NewEdge opens the Badger folder, connects the Kafka publisher and
// builds the pipeline; reg (may be nil) gets the gateway's metrics.
func NewEdge(ctx context.Context, cfg EdgeConfig, log *slog.Logger, reg prometheus.Registerer) (*Edge, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	e := &Edge{cfg: cfg, log: log}
	ok := false
	defer func() {
		if !ok {
			e.close()
		}
	}()
	mopts := []mqtt.Option{
		mqtt.WithServers(cfg.MQTT.Servers...), mqtt.WithClientID(cfg.GatewayID), mqtt.WithTopics(cfg.MQTT.Topics...),
		mqtt.WithDeadLetterTopic(cfg.MQTT.DLQTopic), mqtt.WithLogger(log),
		mqtt.WithReceiveMaximum(sentReceiveMaximum(cfg)), mqtt.WithDedupCapacity(4*int(cfg.MQTT.ReceiveMaximum), 4096),
	}
	if cfg.MQTT.Username != "" {
		mopts = append(mopts, mqtt.WithCredentials(cfg.MQTT.Username, []byte(os.Getenv(cfg.MQTT.PasswordEnv))))
	}
	var err error
	if e.src, err = mqtt.NewSource(mopts...); err != nil {
		return nil, fmt.Errorf("edge %q: %w", cfg.GatewayID, err)
	}
	if e.store, err = badgerstore.Open(badgerstore.WithPath(cfg.State.Dir)); err != nil {
		return nil, fmt.Errorf("edge %q: state %s: %w", cfg.GatewayID, cfg.State.Dir, err)
	}
	if e.pub, err = kafka.NewPublisher(ctx, kafka.PublishTo(cfg.Kafka.Topic, cfg.Kafka.Brokers...), kafka.PublisherLogger(log)); err != nil {
		return nil, fmt.Errorf("edge %q: %w", cfg.GatewayID, err)
	}
	e.p, err = edge.New(e.src, edge.KafkaSink(e.pub, 0), e.store, e.store,
		edge.WithSMA(cfg.Graph.SMAWindow), edge.WithThresholds(cfg.Graph.Low, cfg.Graph.High), edge.WithDwell(cfg.Graph.DwellMS),
		edge.WithShard("edge/"+cfg.GatewayID), edge.WithCheckpointInterval(cfg.Checkpoint.Interval), edge.WithLogger(log))
	if err != nil {
		return nil, err
	}
	st := func() edge.Stats { return e.p.Stats() }
	if err := register(reg,
		counterFunc("edge", "records_in_total", "Readings applied to the conditioning graph.", func() float64 { return float64(st().Readings) }),
		counterFunc("edge", "records_out_total", "Signals handed to the Kafka publisher.", func() float64 { return float64(st().Signals) }),
		counterFunc("edge", "signals_produced_total", "Signals acknowledged by Kafka.", func() float64 { return float64(e.pub.Produced()) }),
		counterFunc("edge", "signals_failed_total", "Signals Kafka failed to take.", func() float64 { return float64(e.pub.Failed()) }),
		gaugeFunc("edge", "signals_buffered", "Signals waiting in the publisher (back-pressure when full).", func() float64 { return float64(e.pub.Buffered()) }),
		counterFunc("edge", "mqtt_received_total", "MQTT PUBLISH packets received.", func() float64 { return float64(st().Source.Received) }),
		counterFunc("edge", "mqtt_duplicates_total", "QoS 2 redeliveries dropped by the dedup window.", func() float64 { return float64(st().Source.Duplicates) }),
		counterFunc("edge", "dlq_total", "Malformed payloads sent to the dead-letter topic.", func() float64 { return float64(st().Source.DeadLettered) }),
		counterFunc("edge", "dlq_errors_total", "Dead-letter publishes that failed.", func() float64 { return float64(st().Source.DeadLetterFailed) }),
		gaugeFunc("edge", "checkpoint_last_id", "Id of the last completed checkpoint.", func() float64 { return float64(st().Checkpoint.LastID) }),
		gaugeFunc("edge", "checkpoint_duration_seconds", "Duration of the last completed checkpoint.", func() float64 { return st().Checkpoint.LastDuration.Seconds() }),
		gaugeFunc("edge", "checkpoint_breaker_state", "Checkpoint circuit breaker: 0 closed, 1 half-open, 2 open.", func() float64 { return breakerValue(st().Checkpoint.Breaker) }),
		gaugeFunc("edge", "event_lag_seconds", "Wall clock minus the newest reading time (ms since the epoch) accepted (0 before the first).", func() float64 {
			ts := st().Source.NewestTS // readings outside the source's limits never count
			if ts == 0 {
				return 0
			}
			return time.Since(time.UnixMilli(ts)).Seconds()
		}),
		gaugeFunc("edge", "checkpoint_age_seconds", "Time since the last completed checkpoint (0 before the first).", func() float64 {
			at := st().Checkpoint.LastCompletedAt
			if at.IsZero() {
				return 0
			}
			return time.Since(at).Seconds()
		}),
	); err != nil {
		return nil, fmt.Errorf("edge %q: metrics: %w", cfg.GatewayID, err)
	}
	ok = true
	return e, nil
}

func breakerValue(s streaming.BreakerState) float64 {
	switch s {
	case streaming.BreakerHalfOpen:
		return 1
	case streaming.BreakerOpen:
		return 2
	}
	return 0
}

// Stats returns the gateway's counters.
func (e *Edge) Stats() EdgeStats {
	return EdgeStats{Stats: e.p.Stats(), Produced: e.pub.Produced()}
}

// Subscribed reports whether the MQTT source has subscribed at least once.
func (e *Edge) Subscribed() bool { return e.src.Stats().Subscribes > 0 }

// Run restores the newest checkpoint, consumes until ctx ends, then
// drains: the final checkpoint flushes the publisher before it saves
// state. It closes the publisher and the Badger folder before returning.
func (e *Edge) Run(ctx context.Context) error {
	defer e.close()
	e.log.Info("edge gateway running", "gateway", e.cfg.GatewayID, "mqtt", e.cfg.MQTT.Servers, "topics", e.cfg.MQTT.Topics,
		"kafka_topic", e.cfg.Kafka.Topic, "state", e.cfg.State.Dir)
	err := e.p.Run(ctx)
	e.log.Info("edge gateway stopped", "gateway", e.cfg.GatewayID, "err", err)
	return err
}

func (e *Edge) close() { e.closeOnce.Do(e.doClose) }

func (e *Edge) doClose() {
	if e.pub != nil {
		fctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := e.pub.Flush(fctx); err != nil {
			e.log.Warn("edge: flush publisher", "err", err)
		}
		cancel()
		e.pub.Close()
	}
	if e.store != nil {
		if err := e.store.Close(); err != nil {
			e.log.Warn("edge: close state", "err", err)
		}
	}
}

// sentReceiveMaximum is the Receive Maximum the gateway puts in CONNECT
// (0 omits it).
func sentReceiveMaximum(cfg EdgeConfig) uint16 {
	if cfg.MQTT.OmitReceiveMaximum {
		return 0
	}
	return cfg.MQTT.ReceiveMaximum
}
