package deploy

import (
	"bufio"
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/internal/envconfig"
	"github.com/tflo-io/tflo/internal/worker"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/workers/simulator"
	"github.com/tflo-io/tflo/workflows"
)

// knownImages are the image references docker-compose.yml and the
// Dockerfile may use: tags known to be published, each with where it was
// read. Bump a version here and in the file together, from the same kind of
// source.
var knownImages = map[string]string{
	// temporalio/samples-server compose/.env at 21ba633 (2026-01-05) and
	// temporalio/docker-compose .env at ae1cc2c (2025-10-30, its last
	// release before it moved to samples-server): TEMPORAL_VERSION,
	// TEMPORAL_ADMINTOOLS_VERSION (the long form; "1.29.1" alone is not
	// published) and TEMPORAL_UI_VERSION. The server matches the dev server
	// tools/temporal pins.
	"temporalio/server:1.29.1":                            "upstream compose .env",
	"temporalio/admin-tools:1.29.1-tctl-1.18.4-cli-1.5.0": "upstream compose .env",
	"temporalio/ui:2.34.0":                                "upstream compose .env",
	// docker-library/official-images at 37079fb (2026-08-22):
	// library/postgres "Tags: 16.15, 16" (upstream Temporal compose uses
	// postgres:16), library/eclipse-mosquitto "Tags: 2.0.22, …"
	// (eclipse-mosquitto:2 now names the 2.1 line), library/nats
	// "Tags: 2.14.5-alpine, …" (the alpine variant has the shell and wget
	// the health check needs), library/golang "SharedTags: 1.26.7, 1.26".
	"postgres:16.15":           "docker-library/official-images",
	"eclipse-mosquitto:2.0.22": "docker-library/official-images",
	"nats:2.14.5-alpine":       "docker-library/official-images",
	"golang:1.26.7":            "docker-library/official-images",
	// library/influxdb listed "Tags: 1.8, 1.8.10" from b089c40 (2021-10-11)
	// to 8f2fb8d (2024-10-25); published tags stay pullable. Same version
	// as tools/influxd.
	"influxdb:1.8.10": "docker-library/official-images history",
	// kafka.apache.org/39/getting-started/docker: "docker pull
	// apache/kafka:3.9.1"; apache/kafka's own compose examples take the
	// image as ${IMAGE}.
	"apache/kafka:3.9.1": "Apache Kafka 3.9 documentation",
	// versitygw's release workflow (.github/workflows/docker.yml) pushes
	// versity/versitygw:<release tag>; its own compose files use :latest.
	// v1.8.0 is the release tools/versitygw pins, also pinned (by digest
	// too) in other projects' compose files.
	"versity/versitygw:v1.8.0": "versitygw release workflow",
	// GoogleContainerTools/distroless: static-debian12 with the nonroot tag.
	"gcr.io/distroless/static-debian12:nonroot": "distroless README",
}

// workerImage is the one tag of the image the workers share.
const workerImage = "tflo/iot-portal:dev"

// Drain bounds the stop_grace_period must outlast.
const (
	// mqttFinalCheckpoint bounds the final checkpoint of a pipeline with
	// an MQTT source, the edge's (pipeline/mqtt.go, finalTimeout); a
	// Kafka source's revokes are bounded by its revoke_timeout.
	mqttFinalCheckpoint = 10 * time.Second
	// drainMargin covers what follows the final checkpoints: flushing and
	// closing the sinks, stopping the Temporal worker, withdrawing the
	// presence lease.
	drainMargin = 10 * time.Second
)

// load reads docker-compose.yml with compose's own loader (schema
// validation, .env, interpolation, merge keys), as `docker compose` does.
// env, when not nil, replaces the variables .env sets.
func load(t *testing.T, env map[string]string) *types.Project {
	t.Helper()
	p, err := loadErr(env)
	require.NoError(t, err)
	return p
}

func loadErr(env map[string]string) (*types.Project, error) {
	opts := []cli.ProjectOptionsFn{cli.WithWorkingDirectory(".."), cli.WithEnvFiles(), cli.WithDotEnv}
	if env != nil {
		opts = []cli.ProjectOptionsFn{cli.WithWorkingDirectory("..")}
		var kv []string
		for k, v := range env {
			kv = append(kv, k+"="+v)
		}
		opts = append(opts, cli.WithEnv(kv))
	}
	o, err := cli.NewProjectOptions([]string{filepath.Join("..", "docker-compose.yml")}, opts...)
	if err != nil {
		return nil, err
	}
	return o.LoadProject(context.Background())
}

// dotEnv returns the variables ../.env sets.
func dotEnv(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", ".env"))
	require.NoError(t, err)
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, ".env line %q is not KEY=value", line)
		out[k] = v
	}
	require.NoError(t, sc.Err())
	return out
}

func isWorker(s types.ServiceConfig) bool { return s.Build != nil }

func hasHealthCheck(s types.ServiceConfig) bool {
	h := s.HealthCheck
	return h != nil && !h.Disable && len(h.Test) > 0 && h.Test[0] != "NONE"
}

// TestComposeServices: the real services the issue names are there, and
// every depends_on target, named volume and mounted file exists.
func TestComposeServices(t *testing.T) {
	p := load(t, nil)
	for _, name := range []string{"postgresql", "temporal-schema", "temporal", "temporal-setup", "temporal-ui", "kafka", "kafka-setup",
		"mosquitto", "s3", "influxdb", "nats", "simulator", "edge", "central-1", "central-2"} {
		require.Contains(t, p.Services, name)
	}
	roles := p.Services["kafka"].Environment["KAFKA_PROCESS_ROLES"]
	require.NotNil(t, roles)
	require.Contains(t, *roles, "controller", "Kafka runs in KRaft mode")
	for name, s := range p.Services {
		require.True(t, s.Image != "" || s.Build != nil, "service %s has neither image nor build", name)
		for d := range s.DependsOn {
			require.Contains(t, p.Services, d, "service %s depends on a missing service", name)
		}
		for _, v := range s.Volumes {
			switch v.Type {
			case types.VolumeTypeBind:
				_, err := os.Stat(v.Source)
				require.NoError(t, err, "service %s mounts a missing file", name)
			case types.VolumeTypeVolume:
				require.Contains(t, p.Volumes, v.Source, "service %s uses an undeclared volume", name)
			}
		}
	}
}

// TestComposeImagesPinned: every image is a tag known to be published (see
// knownImages), never :latest or untagged, and the services built from the
// Dockerfile share one tag, so the image is built once.
func TestComposeImagesPinned(t *testing.T) {
	p := load(t, nil)
	for name, s := range p.Services {
		if isWorker(s) {
			require.Equal(t, workerImage, s.Image, "service %s builds the workers' image under another tag", name)
			continue
		}
		_, ok := knownImages[s.Image]
		require.True(t, ok, "service %s uses image %q, which is not in the pinned list of tags known to exist", name, s.Image)
	}
	b, err := os.ReadFile(filepath.Join("..", "Dockerfile"))
	require.NoError(t, err)
	froms := 0
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && strings.EqualFold(f[0], "FROM") {
			froms++
			_, ok := knownImages[f[1]]
			require.True(t, ok, "the Dockerfile builds FROM %q, which is not in the pinned list", f[1])
		}
	}
	require.Equal(t, 2, froms, "a build stage and a runtime stage")
}

// TestComposeHealthAndStartOrder: a service waits for each dependency to
// be ready, not merely started: healthy (and then the dependency has a
// health check) or, for a one-shot setup service, completed successfully.
// The tflo workers' health check is their own binary probing their
// /readyz on their metrics port (the image has no curl). Every worker waits, through
// such edges, for every service its config reaches; the central workers
// wait for the search attributes to be registered.
func TestComposeHealthAndStartOrder(t *testing.T) {
	p := load(t, nil)
	for name, s := range p.Services {
		for d, dep := range s.DependsOn {
			target := p.Services[d]
			switch dep.Condition {
			case types.ServiceConditionHealthy:
				require.True(t, hasHealthCheck(target), "service %s waits for %s to be healthy, but %s has no health check", name, d, d)
			case types.ServiceConditionCompletedSuccessfully:
				require.Empty(t, target.Ports, "service %s waits for %s to complete, but %s publishes ports like a server", name, d, d)
				require.NotContains(t, []string{"always", "unless-stopped"}, target.Restart, "one-shot service %s must not restart forever", d)
			default:
				t.Fatalf("service %s: depends_on %s has condition %q", name, d, dep.Condition)
			}
		}
	}
	for _, name := range []string{"temporal", "kafka", "postgresql", "mosquitto", "s3", "nats", "influxdb"} {
		require.True(t, hasHealthCheck(p.Services[name]), "%s has no health check", name)
	}
	for name, s := range p.Services {
		if !isWorker(s) {
			continue
		}
		require.True(t, hasHealthCheck(s), "worker %s has no health check", name)
		addr := s.Environment[envPrefix(s.Command[0])+"_METRICS_ADDR"]
		require.NotNil(t, addr, "worker %s serves no metrics address", name)
		require.Equal(t, []string{"CMD", s.Command[0], "--probe", "http://127.0.0.1" + *addr + "/readyz"}, []string(s.HealthCheck.Test),
			"worker %s: its own binary probes the /readyz of its metrics address", name)
	}
	requireWaits(t, p, "simulator", "edge", types.ServiceConditionHealthy)

	// The setup chain of Temporal, in order.
	requireWaits(t, p, "temporal-schema", "postgresql", types.ServiceConditionHealthy)
	requireWaits(t, p, "temporal", "temporal-schema", types.ServiceConditionCompletedSuccessfully)
	requireWaits(t, p, "temporal-setup", "temporal", types.ServiceConditionHealthy)
	requireWaits(t, p, "temporal-ui", "temporal", types.ServiceConditionHealthy)
	requireWaits(t, p, "kafka-setup", "kafka", types.ServiceConditionHealthy)
	for _, c := range []string{"central-1", "central-2"} {
		requireWaits(t, p, c, "temporal-setup", types.ServiceConditionCompletedSuccessfully)
		requireWaits(t, p, c, "kafka-setup", types.ServiceConditionCompletedSuccessfully)
	}
	requireWaits(t, p, "edge", "kafka-setup", types.ServiceConditionCompletedSuccessfully)
	require.Equal(t, []string{"/etc/tflo/temporal/register.sh"}, []string(p.Services["temporal-setup"].Command))
	require.Equal(t, []string{"/etc/tflo/temporal/setup-postgres.sh"}, []string(p.Services["temporal-schema"].Command))
}

func requireWaits(t *testing.T, p *types.Project, svc, on, cond string) {
	t.Helper()
	dep, ok := p.Services[svc].DependsOn[on]
	require.True(t, ok, "%s does not depend on %s", svc, on)
	require.Equal(t, cond, dep.Condition, "%s waits for %s", svc, on)
}

// readyPath reports whether svc reaches target through depends_on edges
// that each wait for readiness (healthy or completed).
func readyPath(p *types.Project, svc, target string, seen map[string]bool) bool {
	if seen[svc] {
		return false
	}
	seen[svc] = true
	for d, dep := range p.Services[svc].DependsOn {
		if dep.Condition != types.ServiceConditionHealthy && dep.Condition != types.ServiceConditionCompletedSuccessfully {
			continue
		}
		if d == target || readyPath(p, d, target, seen) {
			return true
		}
	}
	return false
}

// TestComposeSearchAttributes: deploy/temporal/register.sh registers
// exactly workflows.SearchAttributeFlags, checks they are listed, and
// nothing in the setup swallows a failure.
func TestComposeSearchAttributes(t *testing.T) {
	b, err := os.ReadFile("temporal/register.sh")
	require.NoError(t, err)
	script := string(b)
	flags := workflows.SearchAttributeFlags()
	var names []string
	for i := 1; i < len(flags); i += 2 {
		name, typ, ok := strings.Cut(flags[i], "=")
		require.True(t, ok)
		names = append(names, name)
		require.Regexp(t, `--name `+name+` --type `+typ+`\b`, script, "register.sh does not register %s as %s", name, typ)
	}
	require.Len(t, regexp.MustCompile(`--name \w+ --type`).FindAllString(script, -1), len(names),
		"register.sh registers attributes the workflows do not use")
	require.Contains(t, script, "for a in "+strings.Join(names, " ")+";", "register.sh checks the listing for every attribute")
	require.Contains(t, script, "set -eu")

	compose, err := os.ReadFile(filepath.Join("..", "docker-compose.yml"))
	require.NoError(t, err)
	swallow := regexp.MustCompile(`(;|\|\|)\s*true\b`)
	for _, f := range []struct{ name, body string }{
		{"register.sh", script}, {"docker-compose.yml", string(compose)}, {"setup-postgres.sh", mustRead(t, "temporal/setup-postgres.sh")},
	} {
		require.NotRegexp(t, swallow, f.body, "%s swallows a failure", f.name)
	}
}

func mustRead(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// TestComposePublishesOnLoopback: with the shipped .env every published
// port is bound to 127.0.0.1, the address is one setting, and the
// credentials come from .env, not from the compose file.
func TestComposePublishesOnLoopback(t *testing.T) {
	p := load(t, nil)
	published := 0
	for name, s := range p.Services {
		for _, port := range s.Ports {
			published++
			require.Equal(t, "127.0.0.1", port.HostIP, "service %s publishes %d on %q", name, port.Target, port.HostIP)
		}
	}
	require.Positive(t, published)

	env := dotEnv(t)
	env["PUBLISH_ADDRESS"] = "10.1.2.3"
	for _, s := range load(t, env).Services {
		for _, port := range s.Ports {
			require.Equal(t, "10.1.2.3", port.HostIP, "PUBLISH_ADDRESS does not move every published port")
		}
	}

	for _, secret := range []string{"POSTGRES_PASSWORD", "S3_SECRET_KEY", "S3_ACCESS_KEY", "POSTGRES_USER"} {
		env := dotEnv(t)
		require.Contains(t, env, secret, ".env sets %s", secret)
		delete(env, secret)
		_, err := loadErr(env)
		require.ErrorContains(t, err, secret, "without %s in the environment the file must refuse to load", secret)
	}
}

// TestComposeKeepsState: every stateful service keeps its data on a named
// volume, Kafka included (its checkpoints would otherwise point past a
// fresh topic after `down` and `up`).
func TestComposeKeepsState(t *testing.T) {
	p := load(t, nil)
	volumeAt := func(svc, dir string) bool {
		return slices.ContainsFunc(p.Services[svc].Volumes, func(v types.ServiceVolumeConfig) bool {
			return v.Type == types.VolumeTypeVolume && v.Target == dir
		})
	}
	kafkaDir := p.Services["kafka"].Environment["KAFKA_LOG_DIRS"]
	require.NotNil(t, kafkaDir, "KAFKA_LOG_DIRS is set")
	require.True(t, volumeAt("kafka", *kafkaDir), "Kafka's log dir %s is on a named volume", *kafkaDir)
	for svc, dir := range map[string]string{
		"postgresql": "/var/lib/postgresql/data", "s3": "/data", "nats": "/data", "influxdb": "/var/lib/influxdb",
		"mosquitto": "/mosquitto/data", "edge": "/var/lib/tflo/edge", "central-1": "/var/lib/tflo/central", "central-2": "/var/lib/tflo/central",
	} {
		require.True(t, volumeAt(svc, dir), "%s keeps %s on a named volume", svc, dir)
	}
}

// TestDockerIgnore: the build context leaves out build output, history,
// scratch folders and the development credentials.
func TestDockerIgnore(t *testing.T) {
	lines := strings.Fields(mustRead(t, filepath.Join("..", ".dockerignore")))
	for _, want := range []string{"bin/", ".git/", "tmp/", ".env"} {
		require.Contains(t, lines, want)
	}
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

// envPrefix is the variable prefix of a command's config (worker.Main.Prefix).
func envPrefix(cmd string) string {
	if cmd == "simulator" {
		return worker.SimulatorPrefix
	}
	return envconfig.Prefix
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

// listens returns the container ports a service publishes or exposes.
func listens(s types.ServiceConfig) []string {
	var out []string
	for _, p := range s.Ports {
		out = append(out, strconv.FormatUint(uint64(p.Target), 10))
	}
	return append(out, s.Expose...)
}

// TestComposeWorkers: each tflo worker's config (its mounted YAML with
// the service's TFLO_* variables applied, by the loader the mains use)
// and, for pipeline workers, its pipeline spec (baked into the image,
// with the service's variables) are valid; every TFLO_* variable is a key
// of one of them; every other variable is one a ${...} reference of the
// spec or a *_env key names; every address they reach names a service
// that listens on that port and that the worker waits for (healthy, or
// through a completed setup service); the metrics port is published;
// stop_grace_period outlasts the drain.
func TestComposeWorkers(t *testing.T) {
	p := load(t, nil)
	workers := 0
	for name, s := range p.Services {
		if !isWorker(s) {
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
				if v.Type == types.VolumeTypeBind && v.Target == cfgPath {
					host = v.Source
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
				if v != nil {
					t.Setenv(k, *v)
				}
			}
			prefix := envPrefix(s.Command[0])
			keys, err := envconfig.Keys(prefix, cfg)
			require.NoError(t, err)
			known := map[string]bool{}
			for _, k := range keys {
				known[k.Env] = true
			}
			// tflo's S3 settings for archives (the archive sink's spec
			// references and the backfills read them).
			for _, k := range archiveloc.EnvVariables {
				known[k] = true
			}
			// Load as the main does: the file, the environment, defaults,
			// Validate.
			require.NoError(t, envconfig.Load(host, prefix, cfg))

			var addrs, secrets, refs []string
			var drain time.Duration
			switch cfg := cfg.(type) {
			case *worker.PipelineConfig:
				spec := flag(s.Command, "pipeline")
				base, ok := strings.CutPrefix(spec, "/etc/tflo/pipelines/")
				require.True(t, ok, "--pipeline %s is not a spec baked into the image", spec)
				specPath := filepath.Join("..", "workers", "pipelines", base)
				pl, err := pipeline.Load(specPath)
				require.NoError(t, err)
				skeys, err := envconfig.Keys(envconfig.Prefix, pipeline.Spec{})
				require.NoError(t, err)
				for _, k := range skeys {
					known[k.Env] = true
				}
				for _, m := range regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)`).FindAllStringSubmatch(mustRead(t, specPath), -1) {
					refs = append(refs, m[1])
				}
				a, sec := specReaches(t, pl)
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
				addrs = append(addrs, cfg.Backfill.KafkaBrokers...)
				secrets = append(secrets, cfg.Backfill.TokenEnv)
				switch src := pl.WithDefaults().Source.(type) {
				case *pipeline.KafkaSource:
					drain = src.RevokeTimeout + drainMargin
				case *pipeline.MQTTSource:
					drain = mqttFinalCheckpoint + drainMargin
				}
			case *simulator.MainConfig:
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
					v, ok := s.Environment[env]
					require.True(t, ok && v != nil && *v != "", "its config reads %s, which the service does not set", env)
				}
			}
			for _, addr := range addrs {
				h, port, err := net.SplitHostPort(addr)
				require.NoError(t, err, "address %q", addr)
				target, ok := p.Services[h]
				require.True(t, ok, "address %s names no service", addr)
				require.Contains(t, listens(target), port, "%s does not listen on %s", h, port)
				require.True(t, readyPath(p, name, h, map[string]bool{}),
					"service %s does not wait (healthy or through a completed setup service) for %s", name, h)
			}
			_, mport, err := net.SplitHostPort(cfg.MetricsAddr())
			require.NoError(t, err, "metrics.addr")
			require.Contains(t, listens(s), mport, "metrics port %s is not published", mport)

			require.NotNil(t, s.StopGracePeriod, "service %s: no stop_grace_period, so Docker kills it 10s after SIGTERM", name)
			grace := time.Duration(*s.StopGracePeriod)
			require.Greater(t, grace, drain, "service %s: stop_grace_period %v does not outlast the drain", name, grace)
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
		case pipeline.ArchiveSink:
			if strings.HasPrefix(k.Location, "s3://") {
				require.NotEmpty(t, k.S3.Endpoint, "archive %s: no S3 endpoint", k.Location)
				addrs = append(addrs, hostPort(t, k.S3.Endpoint))
				secrets = append(secrets, k.S3.AccessKeyEnv, k.S3.SecretKeyEnv)
			}
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
// compiled into the image, and every config and pipeline spec it mounts
// or names is also baked in.
func TestDockerfileBuildsTheCommands(t *testing.T) {
	p := load(t, nil)
	df := mustRead(t, filepath.Join("..", "Dockerfile"))
	for name, s := range p.Services {
		if !isWorker(s) {
			continue
		}
		require.Contains(t, df, "./workers/cmd/"+s.Command[0], "service %s runs %s, which the Dockerfile does not build", name, s.Command[0])
		_, err := os.Stat(filepath.Join("..", "workers", "cmd", s.Command[0], "main.go"))
		require.NoError(t, err)
	}
	require.Contains(t, df, "COPY deploy/*.yaml /etc/tflo/")
	require.Contains(t, df, "COPY workers/pipelines/*.yaml /etc/tflo/pipelines/")
}
