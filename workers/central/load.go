package central

import (
	"bytes"
	"fmt"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

// Environment variables that override the YAML file (see ApplyEnv).
var envKeys = []struct {
	name string
	set  func(*Config, string)
}{
	{"TFLO_CENTRAL_WORKER_ID", func(c *Config, v string) { c.WorkerID = v }},
	{"TFLO_CENTRAL_PIPELINE", func(c *Config, v string) { c.Pipeline = v }},
	{"TFLO_KAFKA_BROKERS", func(c *Config, v string) { c.Kafka.Brokers = strings.Split(v, ",") }},
	{"TFLO_KAFKA_GROUP", func(c *Config, v string) { c.Kafka.Group = v }},
	{"TFLO_KAFKA_TOPIC", func(c *Config, v string) { c.Kafka.Topic = v }},
	{"TFLO_STATE_DIR", func(c *Config, v string) { c.State.Dir = v }},
	{"TFLO_ARCHIVE_DIR", func(c *Config, v string) { c.Archive.Dir = v }},
	{"TFLO_INFLUX_URL", func(c *Config, v string) { c.Influx.URL = v }},
	{"TFLO_INFLUX_BUCKET", func(c *Config, v string) { c.Influx.Bucket = v }},
	{"TFLO_TEMPORAL_ADDRESS", func(c *Config, v string) { c.Temporal.Address = v }},
	{"TFLO_TEMPORAL_NAMESPACE", func(c *Config, v string) { c.Temporal.Namespace = v }},
}

// EnvOverrides lists the environment variables ApplyEnv reads.
func EnvOverrides() []string {
	out := make([]string, len(envKeys))
	for i, k := range envKeys {
		out[i] = k.name
	}
	return out
}

// ApplyEnv overrides c's fields from the environment variables listed by
// EnvOverrides that lookup finds non-empty (os.LookupEnv in production).
func (c *Config) ApplyEnv(lookup func(string) (string, bool)) {
	for _, k := range envKeys {
		if v, ok := lookup(k.name); ok && v != "" {
			k.set(c, v)
		}
	}
}

// LoadConfig reads a YAML configuration file (unknown keys are an error),
// applies the environment overrides and the defaults, and validates.
func LoadConfig(path string) (Config, error) {
	var c Config
	if path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("central config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil {
			return Config{}, fmt.Errorf("central config %s: %w", path, err)
		}
	}
	c.ApplyEnv(os.LookupEnv)
	c.applyDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}
