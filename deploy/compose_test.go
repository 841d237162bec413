package deploy

import (
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/tflo-io/tflo/internal/envconfig"
	"github.com/tflo-io/tflo/internal/worker"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/workers/simulator"
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

// workerConfig returns a fresh config of the main a command runs.
func workerConfig(cmd string) worker.Config {
	switch cmd {
	case "worker":
		return &worker.PipelineConfig{}
	case "simulator":
		return &simulator.MainConfig{}
	}
	return nil
}

// flag returns the value of --name in a command line.
func flag(cmd []string, name string) string {
	for i, a := range cmd {
		if a == "--"+name && i+1 < len(cmd) {
			return cmd[i+1]
		}
	}
	return ""
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

// TestComposeWorkers: each tflo worker's config (its mounted YAML with
// the service's TFLO_* variables applied, by the loader the mains use)
// and, for pipeline workers, its pipeline spec (baked into the image,
// with the service's variables) are valid; every TFLO_* variable is a key
// of one of them; every other variable is one a ${...} reference or a
// *_env key names; every address they reach names a service that listens
// on that port and that the worker depends on; the metrics port is
// published.
func TestComposeWorkers(t *testing.T) {
	c := load(t)
	workers := 0
	for name, s := range c.Services {
		if s.Build == nil {
			continue
		}
		workers++
		t.Run(name, func(t *testing.T) {
			cfg := workerConfig(s.Command[0])
			require.NotNil(t, cfg, "service %s runs unknown command %q", name, s.Command[0])
			cfgPath := flag(s.Command, "config")
			require.NotEmpty(t, cfgPath, "service %s: no --config", name)

			// The config file: the host file mounted at the --config path.
			var host string
			for _, v := range s.Volumes {
				parts := strings.Split(v, ":")
				if len(parts) >= 2 && parts[1] == cfgPath {
					host = filepath.Join("..", parts[0])
				}
			}
			require.NotEmpty(t, host, "--config %s is not a mounted file", cfgPath)
			// The service's environment, and nothing else of this process's.
			for _, kv := range os.Environ() {
				if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, envconfig.Prefix+"_") || strings.HasPrefix(k, "TEMPORAL_") {
					t.Setenv(k, "")
					os.Unsetenv(k)
				}
			}
			for k, v := range s.Environment {
				t.Setenv(k, v)
			}
			keys, err := envconfig.Keys(envconfig.Prefix, cfg)
			require.NoError(t, err)
			known := map[string]bool{}
			for _, k := range keys {
				known[k.Env] = true
			}
			require.NoError(t, envconfig.Load(host, envconfig.Prefix, cfg))

			var addrs, secrets, refs []string
			switch cfg := cfg.(type) {
			case *worker.PipelineConfig:
				spec := flag(s.Command, "pipeline")
				base, ok := strings.CutPrefix(spec, "/etc/tflo/pipelines/")
				require.True(t, ok, "--pipeline %s is not a spec baked into the image", spec)
				specPath := filepath.Join("..", "workers", "pipelines", base)
				p, err := pipeline.Load(specPath)
				require.NoError(t, err)
				skeys, err := envconfig.Keys(envconfig.Prefix, pipeline.Spec{})
				require.NoError(t, err)
				for _, k := range skeys {
					known[k.Env] = true
				}
				b, err := os.ReadFile(specPath)
				require.NoError(t, err)
				for _, m := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)`).FindAllStringSubmatch(string(b), -1) {
					refs = append(refs, m[1])
				}
				a, sec := specReaches(t, p)
				addrs, secrets = append(addrs, a...), append(secrets, sec...)
				if cfg.Temporal.Address != "" {
					addrs = append(addrs, cfg.Temporal.Address)
				}
				if cfg.Coordination.NATSURL != "" {
					addrs = append(addrs, hostPort(t, cfg.Coordination.NATSURL))
				}
				if cfg.Backfill.InfluxURL != "" {
					addrs = append(addrs, hostPort(t, cfg.Backfill.InfluxURL))
				}
				secrets = append(secrets, cfg.Temporal.APIKeyEnv, cfg.Backfill.TokenEnv)
			case *simulator.MainConfig:
				require.NoError(t, cfg.Validate())
				addrs = append(addrs, hostPort(t, cfg.MQTT.URL))
				secrets = append(secrets, cfg.MQTT.PasswordEnv)
			}
			for env := range s.Environment {
				switch {
				case strings.HasPrefix(env, envconfig.Prefix+"_"):
					require.True(t, known[env], "%s is not a key of %s's config or spec (see `%s --help`)", env, s.Command[0], s.Command[0])
				default:
					require.True(t, slices.Contains(secrets, env) || slices.Contains(refs, env),
						"%s is neither a TFLO_ key, a ${%s} reference of the spec, nor named by a *_env key", env, env)
				}
			}
			for _, env := range secrets {
				if env != "" {
					require.Contains(t, s.Environment, env, "its config reads %s, which the service does not set", env)
				}
			}
			for _, addr := range addrs {
				host, port, err := net.SplitHostPort(addr)
				require.NoError(t, err, "address %q", addr)
				target, ok := c.Services[host]
				require.True(t, ok, "address %s names no service", addr)
				require.Contains(t, target.listens(), port, "%s does not listen on %s", host, port)
				require.True(t, slices.ContainsFunc(s.DependsOn, func(d string) bool {
					return d == host || strings.HasPrefix(d, host+"-setup") || c.Services[d].dependsOn(c, host)
				}), "service %s does not depend (directly or through a setup service) on %s", name, host)
			}
			_, mport, err := net.SplitHostPort(cfg.MetricsAddr())
			require.NoError(t, err, "metrics.addr")
			require.Contains(t, s.listens(), mport, "metrics port %s is not published", mport)
		})
	}
	require.Equal(t, 4, workers, "simulator, edge and two central workers")
}

func hostPort(t *testing.T, raw string) string {
	t.Helper()
	u, err := url.Parse(raw)
	require.NoError(t, err, raw)
	return u.Host
}

// specReaches returns the host:port of every service a pipeline reaches,
// and the variables its *_env keys name.
func specReaches(t *testing.T, p pipeline.Pipeline) (addrs, secrets []string) {
	t.Helper()
	switch s := p.Source.(type) {
	case *pipeline.KafkaSource:
		addrs = append(addrs, s.Brokers...)
	case *pipeline.MQTTSource:
		for _, u := range s.Servers {
			addrs = append(addrs, hostPort(t, u))
		}
		secrets = append(secrets, s.PasswordEnv)
	}
	for _, sink := range p.Sinks {
		switch k := sink.(type) {
		case pipeline.KafkaSink:
			addrs = append(addrs, k.Brokers...)
		case pipeline.InfluxSink:
			addrs = append(addrs, hostPort(t, k.URL))
			secrets = append(secrets, k.TokenEnv)
		}
	}
	if s3 := p.State.Durable.S3; s3 != nil {
		if s3.Endpoint != "" {
			addrs = append(addrs, hostPort(t, s3.Endpoint))
		}
		secrets = append(secrets, s3.AccessKeyEnv, s3.SecretKeyEnv)
	}
	return addrs, secrets
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
	require.Contains(t, df, "COPY workers/pipelines/*.yaml /etc/tflo/pipelines/")
}

func (s service) dependsOn(c compose, target string) bool {
	for _, d := range s.DependsOn {
		if d == target || c.Services[d].dependsOn(c, target) {
			return true
		}
	}
	return false
}
