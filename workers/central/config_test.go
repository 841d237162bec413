package central

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

func validConfig() Config {
	c := DefaultConfig()
	c.WorkerID = "w1"
	c.Kafka.Brokers = []string{"127.0.0.1:9092"}
	c.State.Dir = "/tmp/x"
	return c
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string // "" = valid
	}{
		{"defaults with required fields", func(*Config) {}, ""},
		{"no worker id", func(c *Config) { c.WorkerID = "" }, "worker_id is empty"},
		{"no brokers", func(c *Config) { c.Kafka.Brokers = nil }, "kafka.brokers is empty"},
		{"unknown input", func(c *Config) { c.Kafka.Input = "csv" }, `kafka.input "csv"`},
		{"signals input", func(c *Config) { c.Kafka.Input = InputSignals }, ""},
		{"pipeline with slash", func(c *Config) { c.Pipeline = "a/b" }, "must not contain a slash"},
		{"window too large", func(c *Config) { c.Graph.Window = 1 << 21 }, "graph.window"},
		{"thresholds inverted", func(c *Config) { c.Graph.AlarmLow, c.Graph.AlarmHigh = 30, 10 }, "want finite low < high"},
		{"bad ts unit", func(c *Config) { c.Graph.TSUnit = "fortnight" }, `graph.ts_unit "fortnight"`},
		{"influx without bucket", func(c *Config) { c.Influx.URL = "http://127.0.0.1:8086" }, "influx.bucket is empty"},
		{"negative interval", func(c *Config) { c.Checkpoint.Interval = Duration(-time.Second) }, "must not be negative"},
		{"temporal address without port", func(c *Config) { c.Temporal.Address = "temporal" }, "not host:port"},
		{"tls cert without key", func(c *Config) {
			c.Temporal.Address = "t:7233"
			c.Temporal.TLS = &TLSFiles{CertFile: "c.pem"}
		}, "must be given together"},
		{"api key without address", func(c *Config) { c.Temporal.APIKey = "k" }, "address is empty"},
		{"coordination", func(c *Config) { c.Coordination.NATSURL = "nats://127.0.0.1:4222" }, ""},
		{"coordination with a worker id that cannot name a lease", func(c *Config) {
			c.Coordination.NATSURL = "nats://127.0.0.1:4222"
			c.WorkerID = "central 1"
		}, `worker_id "central 1" cannot name a coordination lease`},
		{"coordination job with a dot", func(c *Config) {
			c.Coordination.NATSURL = "nats://127.0.0.1:4222"
			c.Coordination.Job = "a.b"
		}, `coordination.job "a.b"`},
		{"coordination lease too short", func(c *Config) {
			c.Coordination.NATSURL = "nats://127.0.0.1:4222"
			c.Coordination.LeaseTTL = Duration(500 * time.Millisecond)
		}, "coordination.lease_ttl 500ms is below the 1s minimum"},
		{"control worker with address", func(c *Config) {
			c.Temporal.Address = "127.0.0.1:7233"
			c.Temporal.ControlWorker = true
		}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := validConfig()
			tt.mutate(&c)
			err := c.Validate()
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

func TestConfigFromYAMLAndJSON(t *testing.T) {
	const doc = `
worker_id: central-1
pipeline: plant
kafka:
  brokers: [127.0.0.1:9092]
  topic: signals
  input: signals
  session_timeout: 6s
graph:
  window: 20
  alarm_low: 10
  alarm_high: 12.5
state:
  dir: /var/lib/tflo
temporal:
  address: temporal.example:7233
  namespace: prod
  api_key_env: TFLO_TEMPORAL_API_KEY
  tls:
    ca_file: /etc/ca.pem
checkpoint:
  interval: 30s
  heartbeat_timeout: 1m
`
	var c Config
	require.NoError(t, yaml.Unmarshal([]byte(doc), &c))
	require.NoError(t, c.Validate())
	require.Equal(t, "central-1", c.WorkerID)
	require.Equal(t, Duration(6*time.Second), c.Kafka.SessionTimeout)
	require.Equal(t, Duration(30*time.Second), c.Checkpoint.Interval)
	require.Equal(t, 12.5, c.Graph.AlarmHigh)
	require.Equal(t, "/etc/ca.pem", c.Temporal.TLS.CAFile)

	// JSON round trip keeps everything but secrets.
	c.Temporal.APIKey = "secret"
	b, err := json.Marshal(c)
	require.NoError(t, err)
	require.NotContains(t, string(b), "secret")
	require.True(t, strings.Contains(string(b), `"interval":"30s"`), string(b))
	var back Config
	require.NoError(t, json.Unmarshal(b, &back))
	c.Temporal.APIKey = ""
	require.Equal(t, c, back)

	var d Duration
	require.ErrorContains(t, d.UnmarshalText([]byte("soon")), `duration "soon"`)
}

func TestTemporalClientOptions(t *testing.T) {
	t.Setenv("TFLO_TEST_KEY", "from-env")
	opts, err := TemporalConfig{Address: "cloud.example:7233", Namespace: "ns", APIKeyEnv: "TFLO_TEST_KEY"}.ClientOptions()
	require.NoError(t, err)
	require.Equal(t, "cloud.example:7233", opts.HostPort)
	require.Equal(t, "ns", opts.Namespace)
	require.NotNil(t, opts.Credentials, "API key credentials")
	require.NotNil(t, opts.ConnectionOptions.TLS, "an API key implies TLS")

	_, err = TemporalConfig{Address: "t:7233", TLS: &TLSFiles{CAFile: "/nonexistent/ca.pem"}}.ClientOptions()
	require.ErrorContains(t, err, "ca_file")

	opts, err = TemporalConfig{Address: "127.0.0.1:7233"}.ClientOptions()
	require.NoError(t, err)
	require.Nil(t, opts.ConnectionOptions.TLS)
	require.Equal(t, "default", opts.Namespace)
}

func TestLoadConfigWithEnvOverrides(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/central.yaml"
	require.NoError(t, os.WriteFile(path, []byte("worker_id: from-file\nkafka:\n  brokers: [a:1]\nstate:\n  dir: /d\n"), 0o600))
	t.Setenv("TFLO_CENTRAL_WORKER_ID", "from-env")
	t.Setenv("TFLO_KAFKA_BROKERS", "b:1,c:2")
	c, err := LoadConfig(path)
	require.NoError(t, err)
	require.Equal(t, "from-env", c.WorkerID)
	require.Equal(t, []string{"b:1", "c:2"}, c.Kafka.Brokers)
	require.Equal(t, "/d", c.State.Dir)
	require.Equal(t, "readings", c.Kafka.Topic, "defaults applied")

	require.NoError(t, os.WriteFile(path, []byte("worker_idd: typo\n"), 0o600))
	_, err = LoadConfig(path)
	require.ErrorContains(t, err, "worker_idd")
}
