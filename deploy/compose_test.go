package deploy

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/tflo-io/tflo/internal/envconfig"
	"github.com/tflo-io/tflo/internal/portal"
	"github.com/tflo-io/tflo/workers/central"
)

// compose is the part of docker-compose.yml the checks read.
type compose struct {
	Services map[string]service `yaml:"services"`
	Volumes  map[string]any     `yaml:"volumes"`
}

type service struct {
	Image       string            `yaml:"image"`
	Build       any               `yaml:"build"`
	Command     []string          `yaml:"command"`
	DependsOn   []string          `yaml:"depends_on"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Expose      []string          `yaml:"expose"`
	Volumes     []string          `yaml:"volumes"`
}

// listens returns the container ports a service publishes or exposes.
func (s service) listens() []string {
	var out []string
	for _, p := range s.Ports {
		parts := strings.Split(p, ":")
		out = append(out, parts[len(parts)-1])
	}
	return append(out, s.Expose...)
}

// workerConfig returns a fresh config of the worker a command runs.
func workerConfig(cmd string) portal.Config {
	switch cmd {
	case "edge":
		return &portal.EdgeConfig{}
	case "central":
		return &portal.CentralConfig{Config: central.DefaultConfig()}
	case "simulator":
		return &portal.SimulatorConfig{}
	}
	return nil
}

func load(t *testing.T) compose {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docker-compose.yml"))
	require.NoError(t, err)
	var c compose
	require.NoError(t, yaml.Unmarshal(b, &c))
	return c
}

// TestComposeServices: the real services the issue names are there, and
// every depends_on and named volume exists.
func TestComposeServices(t *testing.T) {
	c := load(t)
	for _, name := range []string{"temporal", "temporal-ui", "postgresql", "kafka", "mosquitto", "minio", "influxdb", "nats", "simulator", "edge", "central-1", "central-2"} {
		require.Contains(t, c.Services, name)
	}
	require.Contains(t, c.Services["kafka"].Environment["KAFKA_PROCESS_ROLES"], "controller", "Kafka runs in KRaft mode")
	for name, s := range c.Services {
		require.True(t, s.Image != "" || s.Build != nil, "service %s has neither image nor build", name)
		for _, d := range s.DependsOn {
			require.Contains(t, c.Services, d, "service %s depends on a missing service", name)
		}
		for _, v := range s.Volumes {
			src := strings.Split(v, ":")[0]
			if strings.HasPrefix(src, ".") {
				_, err := os.Stat(filepath.Join("..", src))
				require.NoError(t, err, "service %s mounts a missing file", name)
			} else {
				require.Contains(t, c.Volumes, src, "service %s uses an undeclared volume", name)
			}
		}
	}
}

// TestComposeWorkers: each tflo worker's config (its mounted YAML with the
// service's TFLO_* variables applied, by the same loader the mains use)
// is valid; every TFLO_* variable is a key of that worker's config; every
// other variable is one its config names (a *_env key); every address in
// the config names a service that listens on that port; the metrics port
// is published.
func TestComposeWorkers(t *testing.T) {
	c := load(t)
	workers := 0
	for name, s := range c.Services {
		if s.Build == nil {
			continue
		}
		workers++
		require.GreaterOrEqual(t, len(s.Command), 3, "service %s: command must be <worker> --config <file>", name)
		cfg := workerConfig(s.Command[0])
		require.NotNil(t, cfg, "service %s runs unknown command %q", name, s.Command[0])
		require.Equal(t, "--config", s.Command[1])

		// The config file: the host file mounted at the --config path.
		var host string
		for _, v := range s.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) >= 2 && parts[1] == s.Command[2] {
				host = filepath.Join("..", parts[0])
			}
		}
		require.NotEmpty(t, host, "service %s: --config %s is not a mounted file", name, s.Command[2])

		keys, err := envconfig.Keys(envconfig.Prefix, cfg)
		require.NoError(t, err)
		known := map[string]bool{}
		for _, k := range keys {
			known[k.Env] = true
		}
		for env := range s.Environment {
			if strings.HasPrefix(env, envconfig.Prefix+"_") {
				require.True(t, known[env], "service %s: %s is not a config key of %s (see `%s --help`)", name, env, s.Command[0], s.Command[0])
			}
		}

		// Load as the main does: the file, then the service's environment.
		b, err := os.ReadFile(host)
		require.NoError(t, err)
		dec := yaml.NewDecoder(strings.NewReader(string(b)))
		dec.KnownFields(true)
		require.NoError(t, dec.Decode(cfg), "service %s: %s", name, host)
		require.NoError(t, envconfig.Apply(envconfig.Prefix, cfg, func(k string) (string, bool) { v, ok := s.Environment[k]; return v, ok }))
		require.NoError(t, cfg.Validate(), "service %s", name)

		// Variables that are not keys must be named by a *_env key.
		secrets := secretVars(cfg)
		for env := range s.Environment {
			if !strings.HasPrefix(env, envconfig.Prefix+"_") {
				require.True(t, secrets[env], "service %s: %s is neither a TFLO_ key nor named by a *_env key", name, env)
			}
		}
		for env := range secrets {
			require.Contains(t, s.Environment, env, "service %s: its config reads %s, which the service does not set", name, env)
		}

		for _, addr := range addresses(t, cfg) {
			host, port, err := net.SplitHostPort(addr)
			require.NoError(t, err, "service %s: address %q", name, addr)
			target, ok := c.Services[host]
			require.True(t, ok, "service %s: address %s names no service", name, addr)
			require.Contains(t, target.listens(), port, "service %s: %s does not listen on %s", name, host, port)
			require.True(t, slices.ContainsFunc(s.DependsOn, func(d string) bool {
				return d == host || strings.HasPrefix(d, host+"-setup") || c.Services[d].dependsOn(c, host)
			}), "service %s does not depend (directly or through a setup service) on %s", name, host)
		}
		_, mport, err := net.SplitHostPort(metricsAddr(cfg))
		require.NoError(t, err, "service %s: metrics.addr", name)
		require.Contains(t, s.listens(), mport, "service %s: metrics port %s is not published", name, mport)
	}
	require.Equal(t, 4, workers, "simulator, edge and two central workers")
}

// TestDockerfileBuildsTheCommands: every command a built service runs is
// compiled into the image, and every config it mounts is also baked in.
func TestDockerfileBuildsTheCommands(t *testing.T) {
	c := load(t)
	b, err := os.ReadFile(filepath.Join("..", "Dockerfile"))
	require.NoError(t, err)
	df := string(b)
	for name, s := range c.Services {
		if s.Build == nil {
			continue
		}
		require.Contains(t, df, "./workers/cmd/"+s.Command[0], "service %s runs %s, which the Dockerfile does not build", name, s.Command[0])
		_, err := os.Stat(filepath.Join("..", "workers", "cmd", s.Command[0], "main.go"))
		require.NoError(t, err)
	}
	require.Contains(t, df, "COPY deploy/*.yaml /etc/tflo/")
}

func (s service) dependsOn(c compose, target string) bool {
	for _, d := range s.DependsOn {
		if d == target || c.Services[d].dependsOn(c, target) {
			return true
		}
	}
	return false
}

// addresses returns the host:port of every service a worker's config
// reaches.
func addresses(t *testing.T, cfg portal.Config) []string {
	t.Helper()
	hostPort := func(raw string) string {
		u, err := url.Parse(raw)
		require.NoError(t, err, raw)
		return u.Host
	}
	switch c := cfg.(type) {
	case *portal.EdgeConfig:
		var out []string
		for _, s := range c.MQTT.Servers {
			out = append(out, hostPort(s))
		}
		return append(out, c.Kafka.Brokers...)
	case *portal.CentralConfig:
		out := append([]string{c.Temporal.Address, hostPort(c.Influx.URL)}, c.Kafka.Brokers...)
		if c.Durable.S3.Endpoint != "" {
			out = append(out, hostPort(c.Durable.S3.Endpoint))
		}
		if c.Coordination.NATSURL != "" {
			out = append(out, hostPort(c.Coordination.NATSURL))
		}
		return out
	case *portal.SimulatorConfig:
		return []string{hostPort(c.MQTT.URL)}
	}
	t.Fatalf("unknown config %T", cfg)
	return nil
}

func metricsAddr(cfg portal.Config) string {
	switch c := cfg.(type) {
	case *portal.EdgeConfig:
		return c.Metrics.Addr
	case *portal.CentralConfig:
		return c.Metrics.Addr
	case *portal.SimulatorConfig:
		return c.Metrics.Addr
	}
	return ""
}

// secretVars returns the variables a config's *_env keys name.
func secretVars(cfg portal.Config) map[string]bool {
	out := map[string]bool{}
	add := func(vs ...string) {
		for _, v := range vs {
			if v != "" {
				out[v] = true
			}
		}
	}
	switch c := cfg.(type) {
	case *portal.EdgeConfig:
		add(c.MQTT.PasswordEnv)
	case *portal.CentralConfig:
		add(c.Influx.TokenEnv, c.Temporal.APIKeyEnv, c.Durable.S3.AccessKeyEnv, c.Durable.S3.SecretKeyEnv)
	case *portal.SimulatorConfig:
		add(c.MQTT.PasswordEnv)
	}
	return out
}
