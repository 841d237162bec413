package central

import (
	"crypto/tls"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"go.temporal.io/sdk/client"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/internal/tlsconfig"
)

// Duration is a time.Duration that reads and writes as text ("10s",
// "1m30s") in JSON and YAML.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// MarshalText implements encoding.TextMarshaler.
func (d Duration) MarshalText() ([]byte, error) { return []byte(time.Duration(d).String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("duration %q: %w", b, err)
	}
	*d = Duration(v)
	return nil
}

// Input formats of the consumed topic.
const (
	// InputReadings: JSON sensor readings {"sensor","ts","value"}.
	InputReadings = "readings"
	// InputSignals: the edge gateway's signal envelopes (value = the
	// smoothed reading the edge reported).
	InputSignals = "signals"
)

// Config is the central worker's configuration. Zero fields take the
// defaults documented on them (see DefaultConfig); Validate reports what
// cannot work.
type Config struct {
	// WorkerID names this process: its Temporal task queue is
	// workflows.WorkerTaskQueue(WorkerID) and its lease workflow
	// workflows.LeaseWorkflowID(WorkerID). Required; unique per process.
	WorkerID string `json:"worker_id" yaml:"worker_id"`
	// Pipeline names the pipeline in workflow ids, search attributes and
	// archive file names (default "iot-portal").
	Pipeline string `json:"pipeline" yaml:"pipeline"`

	Kafka      KafkaConfig      `json:"kafka" yaml:"kafka"`
	Graph      GraphConfig      `json:"graph" yaml:"graph"`
	State      StateConfig      `json:"state" yaml:"state"`
	Influx     InfluxConfig     `json:"influx" yaml:"influx"`
	Archive    ArchiveConfig    `json:"archive" yaml:"archive"`
	Temporal   TemporalConfig   `json:"temporal" yaml:"temporal"`
	Checkpoint CheckpointConfig `json:"checkpoint" yaml:"checkpoint"`
	// Coordination is the coordination store the worker registers in;
	// its leases are what the lease workflow supervises.
	Coordination CoordinationConfig `json:"coordination" yaml:"coordination"`
}

// CoordinationConfig names the coordination store (package coordination,
// NATS JetStream KV) in which the worker keeps a presence lease for its id
// through the split/lease protocol (coordination/split). The lease is
// renewed by the worker's own goroutine, so it stays alive while Temporal
// is unreachable; the lease activity reports on it to the lease workflow,
// and a second live process started with the same worker id is refused.
// An empty NATSURL leaves the worker out of any coordination store (unless
// WithCoordinationStore gives one).
type CoordinationConfig struct {
	// NATSURL of a JetStream-enabled nats-server 2.11 or later.
	NATSURL string `json:"nats_url" yaml:"nats_url"`
	// Job names the KV buckets ("<job>_durable", "<job>_ephemeral");
	// default "tflo". Worker ids are unique within a job.
	Job string `json:"job" yaml:"job"`
	// LeaseTTL: a worker whose presence was not renewed for this long has
	// lost its leases (default 10s, minimum 1s).
	LeaseTTL Duration `json:"lease_ttl" yaml:"lease_ttl"`
}

// KafkaConfig is the consumer-group side.
type KafkaConfig struct {
	Brokers []string `json:"brokers" yaml:"brokers"` // required
	Group   string   `json:"group" yaml:"group"`     // default "tflo-central"
	Topic   string   `json:"topic" yaml:"topic"`     // default "readings"
	// Input is InputReadings (default) or InputSignals.
	Input string `json:"input" yaml:"input"`
	// DLQTopic receives records that cannot be decoded (default
	// "<topic>.dlq").
	DLQTopic string `json:"dlq_topic" yaml:"dlq_topic"`
	// SessionTimeout: a member silent this long is dropped from the group
	// (default 45s, franz-go's).
	SessionTimeout Duration `json:"session_timeout" yaml:"session_timeout"`
	// RevokeTimeout bounds the final checkpoint of a revoked partition
	// (default 10s).
	RevokeTimeout Duration `json:"revoke_timeout" yaml:"revoke_timeout"`
}

// GraphConfig shapes the derived-signal graph (see Graph).
type GraphConfig struct {
	// Window of the rolling mean/min/max, in records (default 10).
	Window int `json:"window" yaml:"window"`
	// AlarmLow/AlarmHigh: an alarm episode opens when the rolling mean
	// reaches AlarmHigh and closes when it falls to AlarmLow (defaults
	// 20 and 25; need AlarmLow < AlarmHigh).
	AlarmLow  float64 `json:"alarm_low" yaml:"alarm_low"`
	AlarmHigh float64 `json:"alarm_high" yaml:"alarm_high"`
	// TSUnit is the unit of the records' ts field: "ms" (default), "us",
	// "ns" or "s". Outputs carry nanoseconds.
	TSUnit string `json:"ts_unit" yaml:"ts_unit"`
}

// StateConfig places the local Badger database.
type StateConfig struct {
	// Dir is the Badger directory (required unless a durable store is
	// given with WithDurableStore, in which case Badger holds the local
	// copy and Dir may be empty to keep it in memory).
	Dir string `json:"dir" yaml:"dir"`
}

// InfluxConfig enables the InfluxDB sink when URL is set.
type InfluxConfig struct {
	URL    string `json:"url" yaml:"url"`
	Bucket string `json:"bucket" yaml:"bucket"` // 1.8: "db/rp"
	Org    string `json:"org" yaml:"org"`
	// Token (2.x) or "user:password" (1.8); prefer TokenEnv.
	Token    string `json:"-" yaml:"-"`
	TokenEnv string `json:"token_env" yaml:"token_env"`
}

// ArchiveConfig enables the Parquet archive when Dir is set.
type ArchiveConfig struct {
	Dir string `json:"dir" yaml:"dir"`
}

// CheckpointConfig sets the cadence of checkpoints and the slow-path
// timeouts.
type CheckpointConfig struct {
	// Interval between checkpoints of a shard (default 10s). With
	// Temporal it is the CheckpointWorkflow's interval; without, Run
	// checkpoints in process on it.
	Interval Duration `json:"interval" yaml:"interval"`
	// Disabled turns periodic checkpoints off (only revoke and
	// shutdown checkpoint); for measurements.
	Disabled bool `json:"disabled" yaml:"disabled"`
	// HeartbeatTimeout of the lease workflow: a worker silent this long
	// is dead and its shards are handed off (default 30s).
	HeartbeatTimeout Duration `json:"heartbeat_timeout" yaml:"heartbeat_timeout"`
	// HandoffStepTimeout bounds each handoff step (default 1m).
	HandoffStepTimeout Duration `json:"handoff_step_timeout" yaml:"handoff_step_timeout"`
	// StageTimeout is the start-to-close (and schedule-to-start) deadline
	// of each checkpoint stage activity (default: package activities'
	// per-stage defaults).
	StageTimeout Duration `json:"stage_timeout" yaml:"stage_timeout"`
	// BreakerThreshold and BreakerCoolDown shape the workflow's breaker
	// (defaults 3 and 1m).
	BreakerThreshold int      `json:"breaker_threshold" yaml:"breaker_threshold"`
	BreakerCoolDown  Duration `json:"breaker_cool_down" yaml:"breaker_cool_down"`
}

// TemporalConfig is how to reach Temporal. An empty Address disables the
// slow path on Temporal (checkpoints then run in process).
type TemporalConfig struct {
	Address   string `json:"address" yaml:"address"`     // host:port
	Namespace string `json:"namespace" yaml:"namespace"` // default "default"
	// TLS, when set, dials with TLS: CAFile verifies the server (system
	// roots when empty), CertFile/KeyFile present a client certificate.
	TLS *TLSFiles `json:"tls,omitempty" yaml:"tls,omitempty"`
	// APIKey (Temporal Cloud) is sent as a bearer token; prefer APIKeyEnv.
	APIKey    string `json:"-" yaml:"-"`
	APIKeyEnv string `json:"api_key_env" yaml:"api_key_env"`
	// ControlWorker also runs the workflows (workflows.ControlTaskQueue)
	// in this process (default false: a separate worker runs them).
	ControlWorker bool `json:"control_worker" yaml:"control_worker"`
}

// TLSFiles names PEM files.
type TLSFiles struct {
	CAFile     string `json:"ca_file" yaml:"ca_file"`
	CertFile   string `json:"cert_file" yaml:"cert_file"`
	KeyFile    string `json:"key_file" yaml:"key_file"`
	ServerName string `json:"server_name" yaml:"server_name"`
}

// DefaultConfig returns a Config with every default filled in and the
// required fields (WorkerID, Kafka.Brokers, State.Dir) empty.
func DefaultConfig() Config {
	var c Config
	c.applyDefaults()
	return c
}

func (c *Config) applyDefaults() {
	def := func(s *string, v string) {
		if *s == "" {
			*s = v
		}
	}
	defD := func(d *Duration, v time.Duration) {
		if *d == 0 {
			*d = Duration(v)
		}
	}
	def(&c.Pipeline, "iot-portal")
	def(&c.Kafka.Group, "tflo-central")
	def(&c.Kafka.Topic, "readings")
	def(&c.Kafka.Input, InputReadings)
	def(&c.Kafka.DLQTopic, c.Kafka.Topic+".dlq")
	defD(&c.Kafka.RevokeTimeout, 10*time.Second)
	if c.Graph.Window == 0 {
		c.Graph.Window = 10
	}
	if c.Graph.AlarmLow == 0 && c.Graph.AlarmHigh == 0 {
		c.Graph.AlarmLow, c.Graph.AlarmHigh = 20, 25
	}
	def(&c.Graph.TSUnit, "ms")
	def(&c.Temporal.Namespace, "default")
	defD(&c.Checkpoint.Interval, 10*time.Second)
	defD(&c.Checkpoint.HeartbeatTimeout, 30*time.Second)
	defD(&c.Checkpoint.HandoffStepTimeout, time.Minute)
	defD(&c.Checkpoint.BreakerCoolDown, time.Minute)
	def(&c.Coordination.Job, "tflo")
	defD(&c.Coordination.LeaseTTL, 10*time.Second)
	if c.Checkpoint.BreakerThreshold == 0 {
		c.Checkpoint.BreakerThreshold = 3
	}
}

// tsScale returns the factor from the records' ts unit to nanoseconds.
func tsScale(unit string) (int64, bool) {
	switch unit {
	case "ns":
		return 1, true
	case "us":
		return 1e3, true
	case "ms":
		return 1e6, true
	case "s":
		return 1e9, true
	}
	return 0, false
}

// Validate reports every problem with c (after defaults), as sentences.
func (c Config) Validate() error {
	c.applyDefaults()
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf("central config: "+format, args...)) }
	if c.WorkerID == "" {
		add("worker_id is empty: every central process needs its own id (it names its task queue)")
	}
	if strings.ContainsAny(c.Pipeline, "/\\") {
		add("pipeline %q must not contain a slash (it names archive folders)", c.Pipeline)
	}
	if len(c.Kafka.Brokers) == 0 {
		add("kafka.brokers is empty")
	}
	if c.Kafka.Input != InputReadings && c.Kafka.Input != InputSignals {
		add("kafka.input %q is neither %q nor %q", c.Kafka.Input, InputReadings, InputSignals)
	}
	if c.Kafka.SessionTimeout < 0 || c.Kafka.RevokeTimeout < 0 {
		add("kafka timeouts must not be negative")
	}
	if c.Graph.Window < 1 || c.Graph.Window > 1<<20 {
		add("graph.window %d is outside 1..%d", c.Graph.Window, 1<<20)
	}
	if math.IsNaN(c.Graph.AlarmLow) || math.IsNaN(c.Graph.AlarmHigh) || math.IsInf(c.Graph.AlarmLow, 0) ||
		math.IsInf(c.Graph.AlarmHigh, 0) || c.Graph.AlarmLow >= c.Graph.AlarmHigh {
		add("graph alarm thresholds low %g, high %g: want finite low < high", c.Graph.AlarmLow, c.Graph.AlarmHigh)
	}
	if _, ok := tsScale(c.Graph.TSUnit); !ok {
		add("graph.ts_unit %q is not one of s, ms, us, ns", c.Graph.TSUnit)
	}
	if c.Influx.URL != "" && c.Influx.Bucket == "" {
		add("influx.url %q is set but influx.bucket is empty (InfluxDB 1.8: \"db/rp\")", c.Influx.URL)
	}
	if c.Checkpoint.Interval < 0 || c.Checkpoint.StageTimeout < 0 || c.Checkpoint.HeartbeatTimeout < 0 || c.Checkpoint.HandoffStepTimeout < 0 || c.Checkpoint.BreakerCoolDown < 0 {
		add("checkpoint durations must not be negative")
	}
	if c.Checkpoint.BreakerThreshold < 0 {
		add("checkpoint.breaker_threshold %d must not be negative", c.Checkpoint.BreakerThreshold)
	}
	if err := c.Temporal.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("central config: %w", err))
	}
	if c.Coordination.NATSURL != "" {
		if !coordination.ValidKey(c.WorkerID) {
			add("worker_id %q cannot name a coordination lease: use letters, digits, '_', '=', '-' and '.' between tokens", c.WorkerID)
		}
		if !validJob(c.Coordination.Job) {
			add("coordination.job %q must be letters, digits, '_' or '-' (it names the KV buckets)", c.Coordination.Job)
		}
		if c.Coordination.LeaseTTL.D() < time.Second {
			add("coordination.lease_ttl %v is below the 1s minimum", c.Coordination.LeaseTTL.D())
		}
	}
	return errors.Join(errs...)
}

// Validate reports what is wrong with the Temporal settings. An empty
// Address is valid (no Temporal).
func (t TemporalConfig) Validate() error {
	if t.Address == "" {
		if t.TLS != nil || t.APIKey != "" || t.APIKeyEnv != "" || t.ControlWorker {
			return errors.New("temporal: tls, api key or control_worker set but address is empty")
		}
		return nil
	}
	if !strings.Contains(t.Address, ":") {
		return fmt.Errorf("temporal: address %q is not host:port", t.Address)
	}
	if t.TLS != nil && (t.TLS.CertFile == "") != (t.TLS.KeyFile == "") {
		return fmt.Errorf("temporal: tls cert_file %q and key_file %q must be given together", t.TLS.CertFile, t.TLS.KeyFile)
	}
	return nil
}

// apiKey returns the API key, from APIKeyEnv when set.
func (t TemporalConfig) apiKey() string {
	if t.APIKeyEnv != "" {
		if v := os.Getenv(t.APIKeyEnv); v != "" {
			return v
		}
	}
	return t.APIKey
}

// ClientOptions returns the Temporal client options for t: address,
// namespace, TLS and API-key credentials.
func (t TemporalConfig) ClientOptions() (client.Options, error) {
	if err := t.Validate(); err != nil {
		return client.Options{}, err
	}
	opts := client.Options{HostPort: t.Address, Namespace: t.Namespace}
	if opts.Namespace == "" {
		opts.Namespace = "default"
	}
	if t.TLS != nil {
		cfg, err := tlsconfig.Config{CAFile: t.TLS.CAFile, CertFile: t.TLS.CertFile, KeyFile: t.TLS.KeyFile, ServerName: t.TLS.ServerName}.Build()
		if err != nil {
			return client.Options{}, fmt.Errorf("temporal: %w", err)
		}
		opts.ConnectionOptions.TLS = cfg
	}
	if key := t.apiKey(); key != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(key)
		if opts.ConnectionOptions.TLS == nil {
			// API keys only travel over TLS (Temporal Cloud refuses
			// plaintext).
			opts.ConnectionOptions.TLS = &tls.Config{MinVersion: tls.VersionTLS12}
		}
	}
	return opts, nil
}

func (i InfluxConfig) token() string {
	if i.TokenEnv != "" {
		if v := os.Getenv(i.TokenEnv); v != "" {
			return v
		}
	}
	return i.Token
}

func validJob(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}
