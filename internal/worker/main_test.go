package worker_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/natskv"
	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/internal/devstack"
	"github.com/tflo-io/tflo/internal/envconfig"
	"github.com/tflo-io/tflo/internal/loopport"
	"github.com/tflo-io/tflo/internal/temporalclient"
	"github.com/tflo-io/tflo/internal/worker"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/logtest"
	"github.com/tflo-io/tflo/testsuite/mqttbroker"
	"github.com/tflo-io/tflo/testsuite/mqttbroker/mqttbrokertest"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workers/simulator"
)

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// spec is a repository spec's path.
func spec(name string) string { return filepath.Join("..", "..", "workers", "pipelines", name) }

// tradesSpec is a spec of a Kafka source and one SMA node; tests add
// their keys to it (source on line 3, graph from line 4, the nodes last).
const tradesSpec = `name: trades
source:
  kafka: {brokers: [k:9092], topic: readings}
graph:
  inputs: [value]
  nodes:
    - {name: sma, type: sma, inputs: [value], params: {window: 3}}
`

// requireLines requires text to match each of the regular expressions.
func requireLines(t *testing.T, text string, res ...string) {
	t.Helper()
	for _, re := range res {
		require.Regexp(t, re, text)
	}
}

func TestRunMainUsage(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0") // the running worker's metrics port
	require.NoError(t, err)
	t.Cleanup(func() { held.Close() })
	bad := writeFile(t, "c.yaml", "worker_idd: w\n")
	badTTL := writeFile(t, "ttl.yaml", "coordination:\n  lease_ttl: soon\n")
	badSpec := writeFile(t, "p.yaml", "name: x\nsource:\n  kafka: {brokers: [k:1], topic: t}\ngraph:\n  inputs: [value]\n  nodes:\n    - {name: s, type: smaa, inputs: [value]}\n")
	unsetSpec := writeFile(t, "unset.yaml", strings.Replace(tradesSpec, "topic: readings", `topic: "${TFLO_TEST_NEVER_SET}"`, 1)+"checkpoint:\n  intervall: 1s\n")
	noDir := filepath.Join(writeFile(t, "a-file", ""), "state") // under a file: cannot be made
	multiSpec := writeFile(t, "m.yaml", "name: x\nsource:\n  kafka: {brokers: [k:1], topic: \"${TFLO_TEST_MULTI}\"}\ngraph:\n  inputs: [value]\n  nodes:\n    - {name: s, type: smaa, inputs: [value]}\n")
	cases := []struct {
		name     string
		args     []string
		env      map[string]string
		code     int
		contains []string
	}{
		{"help lists every key with its variable", []string{"--help"}, nil, worker.ExitOK,
			[]string{"worker_id", "TFLO_WORKER_ID", "temporal.tls_ca_path", "TFLO_TEMPORAL_TLS_CA_PATH", "backfill.kafka_brokers", "-version", "TFLO_METRICS_ADDR", "Pipeline spec keys", "source.kafka.brokers", "TFLO_SOURCE_KAFKA_BROKERS", "TFLO_STATE_DIR"}},
		// Bug: a bad flag printed the flag package's error, then the whole
		// help (some 150 lines of keys) after it, burying the error.
		{"unknown flag", []string{"--pipelin", "p.yaml"}, nil, worker.ExitUsage, []string{"worker: flag provided but not defined: -pipelin\nRun 'worker --help' for usage.\n"}},
		{"a flag without its value", []string{"--pipeline"}, nil, worker.ExitUsage, []string{"worker: flag needs an argument: -pipeline\nRun 'worker --help' for usage.\n"}},
		{"stray argument", []string{"extra"}, nil, worker.ExitUsage, []string{"unexpected arguments"}},
		{"no spec", nil, nil, worker.ExitUsage, []string{"--pipeline FILE is required"}},
		{"unknown key in the config names its line", []string{"--config", bad, "--pipeline", spec("sma-readings.yaml")}, nil, worker.ExitUsage, []string{"line 1: worker_idd: unknown key"}},
		{"unknown operator names the node and line", []string{"--pipeline", badSpec}, nil, worker.ExitUsage, []string{`graph node "s" (line 7)`, `unknown operator type "smaa"`}},
		{"bad environment value names the variable", []string{"--pipeline", spec("sma-readings.yaml")}, map[string]string{"TFLO_COORDINATION_LEASE_TTL": "soon"}, worker.ExitUsage, []string{"TFLO_COORDINATION_LEASE_TTL"}},
		// Bug: a variable of the wrong type was worded by strconv and time
		// (`strconv.ParseInt: parsing "abc": invalid syntax`), where the
		// file's same mistake says what the key wants.
		{"a mistyped environment value says what its key wants", []string{"--pipeline", spec("sma-readings.yaml"), "--check"},
			map[string]string{"TFLO_STATE_MAX_KEYS": "abc", "TFLO_CHECKPOINT_INTERVAL": "5", "TFLO_LIMITS_MAX_ABS_VALUE": "x", "TFLO_SOURCE_MQTT_RECEIVE_MAXIMUM": "70000"}, worker.ExitUsage,
			[]string{`environment TFLO_STATE_MAX_KEYS (state.max_keys): "abc": not an integer`,
				`environment TFLO_CHECKPOINT_INTERVAL (checkpoint.interval): "5": not a duration like 10s or 1m30s`,
				`environment TFLO_LIMITS_MAX_ABS_VALUE (limits.max_abs_value): "x": not a number`,
				`environment TFLO_SOURCE_MQTT_RECEIVE_MAXIMUM (source.mqtt.receive_maximum): "70000": not a non-negative integer of 16 bits`}},
		// Bug: a spec without a name said `pipeline "": the name must be
		// letters, digits, '.', '_' or '-'`, not that the name was missing.
		{"a spec without a name says the name is not set", []string{"--pipeline", writeFile(t, "noname.yaml", strings.TrimPrefix(tradesSpec, "name: trades\n"))}, nil, worker.ExitUsage,
			[]string{"noname.yaml: pipeline: name is not set (it names the pipeline's workflows"}},
		// Bug: a state folder the worker cannot create (the spec's default
		// /var/lib/tflo/... for a user who is not root) was named as
		// "state folder DIR", not by the key that sets it.
		{"a state folder that cannot be made names its key", []string{"--pipeline", spec("sma-readings.yaml")},
			map[string]string{"STATE_DIR": noDir, "KAFKA_BROKERS": "127.0.0.1:1"}, worker.ExitFailure, []string{"state.dir " + noDir + ": mkdir "}},
		// Bug: a graph output naming no node was the one graph problem
		// reported without its line.
		{"a graph output naming no node names its line", []string{"--pipeline", writeFile(t, "outs.yaml", strings.Replace(tradesSpec, "  inputs: [value]\n", "  inputs: [value]\n  outputs: [smaa]\n", 1)), "--check"}, nil, worker.ExitUsage,
			[]string{`pipeline "trades": line 6: graph output "smaa" is neither a node nor an input`}},
		// Bug: a Kafka sink that took the source's brokers, not reached,
		// named sinks[0] and the address, not where the address came from.
		{"a kafka sink not reached says its brokers are the source's", []string{"--pipeline", spec("sma-readings.yaml")},
			map[string]string{"STATE_DIR": t.TempDir(), "KAFKA_BROKERS": "127.0.0.1:1"}, worker.ExitFailure,
			[]string{`sinks[0]: kafka sink (brokers from source.kafka.brokers): kafka publisher (topic `, "dial tcp 127.0.0.1:1: "}},
		{"a kafka sink not reached names its own brokers key", []string{"--pipeline", writeFile(t, "own.yaml", strings.Replace(tradesSpec, "k:9092", "127.0.0.1:1", 1)+"sinks:\n  - kafka: {topic: trades.sma, brokers: [127.0.0.1:1]}\nstate:\n  dir: "+t.TempDir()+"\n")},
			nil, worker.ExitFailure,
			[]string{`sinks[0]: kafka sink (brokers from its kafka.brokers): kafka publisher (topic `, "dial tcp 127.0.0.1:1: "}},
		// Bug: the same problems of a value a TFLO_ variable set named no
		// variable: the user was sent looking for graph.outputs in a spec
		// that has none.
		{"a graph output from the environment naming no node names its variable", []string{"--pipeline", spec("sma-readings.yaml"), "--check"},
			map[string]string{"TFLO_GRAPH_OUTPUTS": "smaa", "TFLO_CHECKPOINT_INTERVAL": "-1s"}, worker.ExitUsage,
			[]string{`pipeline "sma-readings": environment TFLO_GRAPH_OUTPUTS: graph output "smaa" is neither a node nor an input`,
				`pipeline "sma-readings": environment TFLO_CHECKPOINT_INTERVAL: checkpoint.interval -1s must not be negative`}},
		// Bug: a --probe URL without its scheme was refused in net/url's
		// words ("first path segment in URL cannot contain colon"). Still
		// exit 1, a health check's failure.
		{"a probe URL without its scheme says what it wants", []string{"--probe", "127.0.0.1:9102/readyz"}, nil, worker.ExitFailure,
			[]string{`probe "127.0.0.1:9102/readyz": want an http:// or https:// URL of the metrics address, like http://127.0.0.1:9102/readyz`}},
		// Bug: an unset ${NAME} stopped the loading there: the file's
		// other problems and the environment's came only on the next run.
		{"an unset ${NAME} is reported with the file's and the environment's other problems", []string{"--pipeline", unsetSpec, "--check"}, map[string]string{"TFLO_STATE_MAX_KEYS": "abc"}, worker.ExitUsage,
			[]string{"3 problems", "line 3: ${TFLO_TEST_NEVER_SET}: the variable is not set", "line 9: checkpoint.intervall: unknown key", `environment TFLO_STATE_MAX_KEYS (state.max_keys): "abc": not an integer`}},
		// Bug: a file that is not there was "file nope.yaml: no such file
		// or directory", not naming the flag that named it.
		{"a spec that is not there names --pipeline", []string{"--pipeline", "nope.yaml"}, nil, worker.ExitUsage,
			[]string{"worker: --pipeline \"nope.yaml\": no such file or directory\n"}},
		{"a spec that is not there names --pipeline to --check", []string{"--pipeline", "nope.yaml", "--check"}, nil, worker.ExitUsage,
			[]string{"worker: --pipeline \"nope.yaml\": no such file or directory\n"}},
		{"a config that is not there names --config", []string{"--config", "nope.yaml", "--pipeline", "nope2.yaml"}, nil, worker.ExitUsage,
			[]string{"worker: invalid configuration:\n--config \"nope.yaml\": no such file or directory\n--pipeline \"nope2.yaml\": no such file or directory\n"}},
		{"check loads the spec", []string{"--pipeline", spec("market-data.yaml"), "--check"}, nil, worker.ExitOK, nil},
		// Bug: --check started the metrics listener, so a check beside the
		// running worker (docker compose exec) failed on its port.
		{"check serves no metrics", []string{"--pipeline", spec("market-data.yaml"), "--check"}, map[string]string{"TFLO_METRICS_ADDR": held.Addr().String()}, worker.ExitOK, nil},
		{"a bad Temporal TLS file names its key", []string{"--pipeline", spec("sma-readings.yaml")}, map[string]string{"TFLO_TEMPORAL_ADDRESS": "t:7233", "TFLO_TEMPORAL_TLS_CA_PATH": "/nonexistent/ca.pem"}, worker.ExitUsage, []string{"temporal.tls_ca_path", "/nonexistent/ca.pem"}},
		{"a TFLO_ variable that names no key is refused, with the key it likely meant", []string{"--pipeline", spec("sma-readings.yaml"), "--check"}, map[string]string{"TFLO_SOURCE_KAFKA_TOPC": "trades"}, worker.ExitUsage,
			[]string{"environment TFLO_SOURCE_KAFKA_TOPC: matches no configuration key (did you mean TFLO_SOURCE_KAFKA_TOPIC?)"}},
		{"the simulator's variables, archive S3 settings and tool switches are not the worker's problem", []string{"--pipeline", spec("sma-readings.yaml"), "--check"},
			map[string]string{"TFLO_SIMULATOR_SENSORS": "3", "TFLO_S3_ENDPOINT": "http://s3", "TFLO_REQUIRE_SERVICES": "1", "TFLO_MOSQUITTO": "/usr/sbin/mosquitto"}, worker.ExitOK, nil},
		{"a bad duration in the file and a bad value in the environment, reported together", []string{"--config", badTTL, "--pipeline", spec("sma-readings.yaml")}, map[string]string{"TFLO_CONTROL_WORKER": "maybe"}, worker.ExitUsage,
			[]string{"2 problems", `line 2: coordination.lease_ttl: "soon" is not a duration`, `environment TFLO_CONTROL_WORKER (control_worker): "maybe"`}},
		// Bug: a bad worker setting stopped the worker before the spec
		// was read, so the spec's problems came only on the next run.
		{"a bad worker setting and a bad spec, reported together", []string{"--pipeline", badSpec}, map[string]string{"TFLO_LOG_LEVEL": "bogus", "TFLO_SOURCE_KAFKA_TOPC": "t"}, worker.ExitUsage,
			[]string{"log.level", "bogus", "TFLO_SOURCE_KAFKA_TOPC: matches no configuration key", `graph node "s" (line 7)`, `unknown operator type "smaa"`}},
		// Bug: a ${NAME} holding newlines shifted the lines of the spec's
		// errors after it (line 9 for the node of line 7).
		{"a ${NAME} holding newlines keeps the spec's lines", []string{"--pipeline", multiSpec}, map[string]string{"TFLO_TEST_MULTI": "x\ny\nz"}, worker.ExitUsage,
			[]string{`graph node "s" (line 7)`, `unknown operator type "smaa"`}},
		{"help shows defaults and descriptions", []string{"--help"}, nil, worker.ExitOK,
			[]string{"default 10s", "LeaseTTL: a worker whose presence was not renewed", "default 1m0s", "DeadLetterTopic receives records that cannot be decoded", "--print-config", "-pprof"}},
		// Bug: backfill.archive_roots and backfill.database_prefixes shared
		// one doc comment, whose first sentence ("Allowlists (issue 17.10):
		// a backfill's input is trusted no further than these.") was all
		// --help said of either: not what each allows, nor its default.
		{"help says what each backfill allowlist allows and its default", []string{"--help"}, nil, worker.ExitOK,
			[]string{"ArchiveRoots are the archives a backfill may read", "default: the folders of the pipeline's archive sinks",
				"DatabasePrefixes: a backfill writes to, and creates, only an InfluxDB database whose name starts with one", "default: the databases of the pipeline's influx sinks"}},
		// Bug: a metrics.addr without a port passed --check and failed the
		// run (exit 1) once the pipeline had started.
		{"a metrics address without a port is refused by --check", []string{"--pipeline", spec("sma-readings.yaml"), "--check"}, map[string]string{"TFLO_METRICS_ADDR": "nohost"}, worker.ExitUsage, []string{`metrics.addr "nohost": want host:port`}},
		// Bug: a port out of range split fine, passed --check and failed
		// the run (exit 1) on the listener.
		{"a metrics port out of range is refused by --check", []string{"--pipeline", spec("sma-readings.yaml"), "--check"}, map[string]string{"TFLO_METRICS_ADDR": "127.0.0.1:99999"}, worker.ExitUsage, []string{`metrics.addr "127.0.0.1:99999": port "99999" is not 0-65535 nor a service name`}},
		// Bug: --pprof without a metrics address served nothing, silently.
		{"--pprof needs a metrics address", []string{"--pipeline", spec("sma-readings.yaml"), "--pprof"}, map[string]string{"TFLO_METRICS_ADDR": ""}, worker.ExitUsage, []string{"--pprof serves the profiles on the metrics address: set metrics.addr (TFLO_METRICS_ADDR)"}},
		// Bug: --operators ran alone and dropped the flags given with it
		// (--pipeline, --check), or was dropped for them (--print-config).
		{"--operators goes with no other flag", []string{"--operators", "--pipeline", spec("sma-readings.yaml"), "--check"}, nil, worker.ExitUsage,
			[]string{"worker: --operators lists the operator types and exits: it does not go with --check, --pipeline"}},
		{"--operators does not go with --print-config", []string{"--print-config", "--operators"}, nil, worker.ExitUsage,
			[]string{"it does not go with --print-config"}},
		{"control_worker needs Temporal", []string{"--pipeline", spec("sma-readings.yaml")}, map[string]string{"TFLO_CONTROL_WORKER": "true", "TEMPORAL_ADDRESS": "", "TEMPORAL_CONFIG_FILE": ""}, worker.ExitUsage, []string{"control_worker needs temporal.address"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			var errOut bytes.Buffer
			code := worker.RunMain(worker.PipelineMain(), c.args, &errOut)
			require.Equal(t, c.code, code, errOut.String())
			for _, s := range c.contains {
				require.Contains(t, errOut.String(), s)
			}
			if code == worker.ExitUsage {
				// A usage error says what is wrong, not the whole help,
				// and in its own words, not Go's packages'.
				require.NotContains(t, errOut.String(), "Keys (key, variable, type")
				require.NotRegexp(t, `strconv\.|time: invalid`, errOut.String())
			}
		})
	}
}

// TestHelpShowsDeadLetterDefaultsAndFileOnlyKeys: --help showed no
// default for dead_letter.kafka.max_buffered (10000: its defaults were
// taken from a spec without a dead-letter sink) and did not list the
// spec keys no variable sets (decoder, sinks, graph.nodes).
func TestHelpShowsDeadLetterDefaultsAndFileOnlyKeys(t *testing.T) {
	var errOut bytes.Buffer
	require.Equal(t, worker.ExitOK, worker.RunMain(worker.PipelineMain(), []string{"--help"}, &errOut))
	help := errOut.String()
	requireLines(t, help,
		`(?m)^  dead_letter\.kafka\.max_buffered +TFLO_DEAD_LETTER_KAFKA_MAX_BUFFERED +int +default 10000 +MaxBuffered bounds`,
		`(?m)^  decoder +\(file only\) +DecoderSpec +default reading +Decoder turns a message into a keyed record`,
		`(?m)^  sinks +\(file only\) +\[\]SinkEntry +Sinks receive the graph's outputs`,
		`(?m)^  graph\.nodes +\(file only\) +\[\]Node +Nodes are operators`,
	)
}

// TestHelpListsFileOnlyKeysInPlace: --help listed the spec keys no
// variable sets (decoder, graph.inputs, graph.nodes, sinks) after all the
// others, decoder after checkpoint.*; each is in its place, in the order
// of the spec's sections.
func TestHelpListsFileOnlyKeysInPlace(t *testing.T) {
	var errOut bytes.Buffer
	require.Equal(t, worker.ExitOK, worker.RunMain(worker.PipelineMain(), []string{"--help"}, &errOut))
	_, section, ok := strings.Cut(errOut.String(), "\nPipeline spec keys")
	require.True(t, ok, "no spec keys in the help")
	var sections, graph []string // top-level sections as listed; graph's keys
	for _, line := range strings.Split(section, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) == 0 {
			break
		}
		top, _, _ := strings.Cut(f[0], ".")
		if len(sections) == 0 || sections[len(sections)-1] != top {
			sections = append(sections, top)
		}
		if top == "graph" {
			graph = append(graph, f[0])
		}
	}
	require.Equal(t, []string{"name", "source", "decoder", "time_unit", "limits", "graph", "sinks", "dead_letter", "state", "checkpoint"}, sections)
	require.Equal(t, []string{"graph.inputs", "graph.nodes", "graph.outputs"}, graph)
	// The help lists envconfig.AllKeys: the variables among them are
	// the ones the configs read.
	for _, zero := range []any{worker.PipelineConfig{}, pipeline.Spec{}, simulator.MainConfig{}} {
		keys, err := envconfig.Keys("X", zero)
		require.NoError(t, err)
		all, err := envconfig.AllKeys("X", zero)
		require.NoError(t, err)
		require.Equal(t, keys, slices.DeleteFunc(all, func(k envconfig.Key) bool { return k.Env == "" }), "%T", zero)
	}
}

// TestStaticMembershipWithoutAWorkerIDIsWarned: a spec setting
// source.kafka.static_membership to true, with no worker_id, ran as a
// dynamic member without a word; the worker warns, at --check as at
// start, naming both keys (not for the default true).
func TestStaticMembershipWithoutAWorkerIDIsWarned(t *testing.T) {
	specPath := writeFile(t, "p.yaml", strings.Replace(tradesSpec, "topic: readings}", "topic: readings, static_membership: true}", 1))
	check := func(spec string) string {
		var errOut bytes.Buffer
		require.Equal(t, worker.ExitOK, worker.RunMain(worker.PipelineMain(), []string{"--pipeline", spec, "--check"}, &errOut), errOut.String())
		return errOut.String()
	}
	t.Setenv("TFLO_WORKER_ID", "")
	os.Unsetenv("TFLO_WORKER_ID")
	require.Contains(t, check(specPath), "source.kafka.static_membership is true ("+specPath+":3) but worker_id is empty: the worker, named by its host name, joins the Kafka group as a dynamic member; set worker_id (TFLO_WORKER_ID) for static membership")
	require.NotContains(t, check(spec("sma-readings.yaml")), "static_membership", "the default true is no request")
	t.Setenv("TFLO_WORKER_ID", "w1")
	require.NotContains(t, check(specPath), "static_membership")
}

// TestIgnoredSettingsAreNamed: a setting whose feature an empty key
// turns off (backfill.token_env without backfill.influx_url or
// kafka_brokers, coordination.nats_tls without coordination.nats_url)
// was accepted and ignored without a word; the worker warns of each, at
// --check as at start, naming the key and the key that is empty.
func TestIgnoredSettingsAreNamed(t *testing.T) {
	cfg := writeFile(t, "c.yaml", "coordination:\n  nats_tls: {server_name: nats.internal}\n  job: plant\nbackfill:\n  token_env: INFLUX_TOKEN\n  archive_roots: [file:///archive]\n")
	var errOut bytes.Buffer
	code := worker.RunMain(worker.PipelineMain(), []string{"--config", cfg, "--pipeline", spec("sma-readings.yaml"), "--check"}, &errOut)
	require.Equal(t, worker.ExitOK, code, errOut.String())
	for _, want := range []string{
		"backfill.token_env is set but ignored: backfills are off (backfill.influx_url and backfill.kafka_brokers are empty)",
		"backfill.archive_roots is set but ignored",
		"coordination.nats_tls is set but ignored: coordination.nats_url is empty",
		"coordination.job is set but ignored",
	} {
		require.Contains(t, errOut.String(), want)
	}
	require.NotContains(t, errOut.String(), "lease_ttl", "left at its default")

	// Turned on, nothing is ignored.
	errOut.Reset()
	t.Setenv("TFLO_BACKFILL_KAFKA_BROKERS", "localhost:9092")
	t.Setenv("TFLO_TEMPORAL_ADDRESS", "localhost:7233")
	code = worker.RunMain(worker.PipelineMain(), []string{"--config", cfg, "--pipeline", spec("sma-readings.yaml"), "--check"}, &errOut)
	require.Equal(t, worker.ExitOK, code, errOut.String())
	require.NotContains(t, errOut.String(), "backfill.")
	require.Contains(t, errOut.String(), "coordination.nats_tls is set but ignored")
}

// Every TFLO_ variable CONTRIBUTING.md tells a developer to set (the test
// servers' paths, TFLO_REQUIRE_SERVICES, TFLO_WRITE_GOLDEN) may sit in the
// shell a worker runs from, as README.md says the worker accepts the
// development tools' switches. Bug: TFLO_MOSQUITTO was refused ("matches
// no configuration key"), so a developer who pointed the tests at a
// Mosquitto build could not run bin/worker from that shell.
func TestWorkerAcceptsContributingSwitches(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "..", "CONTRIBUTING.md"))
	require.NoError(t, err)
	names := regexp.MustCompile(`\bTFLO_[A-Z0-9_]*[A-Z0-9]\b`).FindAllString(string(doc), -1)
	slices.Sort(names)
	names = slices.Compact(names)
	require.Contains(t, names, "TFLO_MOSQUITTO", "CONTRIBUTING.md no longer names TFLO_MOSQUITTO: update this test")
	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, "/nonexistent/"+strings.ToLower(name))
			var errOut bytes.Buffer
			code := worker.RunMain(worker.PipelineMain(), []string{"--pipeline", spec("sma-readings.yaml"), "--check"}, &errOut)
			require.Equal(t, worker.ExitOK, code, errOut.String())
		})
	}
}

// stopWithSIGTERM sends this process SIGTERM and waits until the main
// running in it (its exit code on done) exits 0.
func stopWithSIGTERM(t *testing.T, done <-chan int, errOut *logtest.Buffer, within time.Duration) {
	t.Helper()
	require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGTERM))
	select {
	case code := <-done:
		require.Equal(t, worker.ExitOK, code, errOut.String())
	case <-time.After(within):
		t.Fatalf("the worker did not stop within %v of SIGTERM", within)
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	addr, err := loopport.Pick()
	require.NoError(t, err)
	return addr
}

// metric reads a metric of the pipeline (label pipeline="...") from /metrics.
func metric(t *testing.T, url, name string) float64 {
	resp, err := http.Get(url)
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + `(?:\{[^}]*\})? (\S+)$`).FindSubmatch(b)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(string(m[1]), 64)
	return v
}

// TestEdgeSpecDrainsOnSIGTERM runs the worker main on the iot-portal edge
// spec against a real broker and Kafka: readings show on /metrics,
// SIGTERM stops it with exit 0 after the final checkpoint, which a second
// run restores (the state folder held it).
func TestEdgeSpecDrainsOnSIGTERM(t *testing.T) {
	k, err := devstack.StartKafka(devstack.KafkaTopic{Name: "signals", Partitions: 2})
	require.NoError(t, err)
	defer k.Close()
	b := mqttbrokertest.Start(t, mqttbroker.Options{})
	state := filepath.Join(t.TempDir(), "edge")
	maddr := freePort(t)
	t.Setenv("MQTT_URL", b.URL())
	t.Setenv("KAFKA_BROKERS", k.Addrs()[0])
	t.Setenv("STATE_DIR", state)
	t.Setenv("TFLO_CHECKPOINT_INTERVAL", "1h") // only the final checkpoint
	t.Setenv("TFLO_SOURCE_MQTT_OMIT_RECEIVE_MAXIMUM", "true")
	t.Setenv("TFLO_METRICS_ADDR", maddr)

	done := make(chan int, 1)
	var errOut logtest.Buffer
	go func() {
		done <- worker.RunMain(worker.PipelineMain(), []string{"--pipeline", spec("iot-portal-edge.yaml")}, &errOut)
	}()
	url := "http://" + maddr + "/metrics"
	require.Eventually(t, func() bool { return metric(t, url, "tflo_pipeline_owned_shards") == 1 }, 30*time.Second, 20*time.Millisecond, errOut.String())
	resp, err := http.Get(url)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Regexp(t, `(?m)^tflo_build_info\{go_version="go[^"]+",revision="[^"]*",version="[^"]+"\} 1$`, string(body), "the worker says which build it runs")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sim, err := simulator.New(simulator.Config{Sensors: 3, Rounds: 10, Start: time.Unix(1_700_000_000, 0), AnomalyEvery: -1, Malformed: 0.001})
	require.NoError(t, err)
	pub, err := simulator.DialMQTT(ctx, simulator.MQTTOptions{URL: b.URL()})
	require.NoError(t, err)
	require.NoError(t, sim.Run(ctx, pub))
	require.NoError(t, pub.Close(ctx))
	n := float64(sim.Stats().Readings)
	require.Eventually(t, func() bool { return metric(t, url, "tflo_pipeline_records_in_total") == n }, 30*time.Second, 20*time.Millisecond)
	_, text := get(url)
	require.Regexp(t, `(?m)^tflo_pipeline_checkpoint_breaker_state\{pipeline="iot-portal-edge",shard="[^"]+",state="closed"\} 1$`, text, "breaker closed, one series per state")
	require.Regexp(t, `(?m)^tflo_mqtt_source_events_total\{client_id="[^"]+",counter="processed",pipeline="iot-portal-edge"\} [1-9]`, text, "the MQTT source's counters are registered")
	code, _ := get("http://" + maddr + "/debug/pprof/")
	require.Equal(t, http.StatusNotFound, code, "pprof is off without --pprof")
	require.Greater(t, metric(t, url, "tflo_pipeline_event_lag_seconds"), float64(time.Since(time.Unix(1_700_000_000, 0))/time.Second)-60,
		"event lag follows the readings' time")

	stopWithSIGTERM(t, done, &errOut, 30*time.Second)
	ents, err := os.ReadDir(state)
	require.NoError(t, err)
	require.NotEmpty(t, ents, "the state folder holds the Badger database and its checkpoints")
}

// TestCentralSpecDrainsOnSIGTERM runs the worker main on the iot-portal
// central spec (no Temporal: in-process checkpoints) on signals in a real
// Kafka protocol, with a shared durable folder: records show on
// /metrics, an undecodable record is dead-lettered, SIGTERM exits 0 after
// the final checkpoints, which are in the durable folder, and the archive
// is flushed.
func TestCentralSpecDrainsOnSIGTERM(t *testing.T) {
	k, err := devstack.StartKafka(devstack.KafkaTopic{Name: "signals", Partitions: 2}, devstack.KafkaTopic{Name: "signals.dlq", Partitions: 1})
	require.NoError(t, err)
	defer k.Close()
	dir := t.TempDir()
	maddr := freePort(t)
	for k, v := range map[string]string{
		"TFLO_WORKER_ID": "c1", "KAFKA_BROKERS": k.Addrs()[0], "TFLO_SOURCE_KAFKA_SESSION_TIMEOUT": "2s",
		"STATE_DIR": filepath.Join(dir, "badger"), "TFLO_STATE_DURABLE_DIR": filepath.Join(dir, "durable"),
		"ARCHIVE_LOCATION": "file://" + filepath.Join(dir, "archive"), "INFLUX_URL": "http://127.0.0.1:1", "TFLO_CHECKPOINT_INTERVAL": "1h", "TFLO_METRICS_ADDR": maddr,
	} {
		t.Setenv(k, v)
	}
	// No InfluxDB here: a spec without its influx sink.
	src, err := os.ReadFile(spec("iot-portal-central.yaml"))
	require.NoError(t, err)
	noInflux := regexp.MustCompile(`(?s)  - influx:.*?bucket: iot_portal/autogen\n`).ReplaceAll(src, nil)
	require.NotEqual(t, src, noInflux)
	path := writeFile(t, "central.yaml", string(noInflux))

	done := make(chan int, 1)
	var errOut logtest.Buffer
	go func() { done <- worker.RunMain(worker.PipelineMain(), []string{"--pipeline", path}, &errOut) }()
	url := "http://" + maddr + "/metrics"
	require.Eventually(t, func() bool { return metric(t, url, "tflo_pipeline_owned_shards") == 2 }, 30*time.Second, 20*time.Millisecond, errOut.String())

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pub, err := kafka.NewPublisher(ctx, kafka.PublishTo("signals", k.Addrs()...))
	require.NoError(t, err)
	defer pub.Close()
	type payload struct {
		Smoothed float64 `json:"smoothed"`
	}
	const n = 20
	for i := range n {
		sig := streaming.Signal[string, payload]{Key: fmt.Sprintf("s%d", i%4), TS: int64(1000 + i), Mode: "raised", Payload: payload{Smoothed: float64(20 + i)}}
		require.NoError(t, kafka.PublishSignal(ctx, pub, sig, nil, 0))
	}
	require.NoError(t, pub.Publish(ctx, "s0", []byte("not an envelope")))
	require.NoError(t, pub.Flush(ctx))
	require.Eventually(t, func() bool {
		return metric(t, url, "tflo_pipeline_records_in_total") == n && metric(t, url, "tflo_pipeline_dlq_total") == 1
	}, 30*time.Second, 20*time.Millisecond)
	// The dead letter is on the spec's dead-letter topic (the default
	// dead-letter sink), as it came, naming its group and reason.
	dl, err := kgo.NewClient(kgo.SeedBrokers(k.Addrs()...), kgo.ConsumeTopics("signals.dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer dl.Close()
	var letters []*kgo.Record
	for len(letters) == 0 && ctx.Err() == nil {
		dl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { letters = append(letters, r) })
	}
	require.Len(t, letters, 1)
	require.Equal(t, "not an envelope", string(letters[0].Value))
	hs := map[string]string{}
	for _, h := range letters[0].Headers {
		hs[h.Key] = string(h.Value)
	}
	require.Equal(t, "tflo-central", hs[kafka.HeaderDLQGroup])
	require.Equal(t, "signals", hs[kafka.HeaderDLQTopic])
	require.NotEmpty(t, hs[kafka.HeaderDLQError])

	stopWithSIGTERM(t, done, &errOut, 60*time.Second)
	ents, err := os.ReadDir(filepath.Join(dir, "durable"))
	require.NoError(t, err)
	require.NotEmpty(t, ents, "final checkpoints in the durable folder")
	arch, err := os.ReadDir(filepath.Join(dir, "archive"))
	require.NoError(t, err)
	require.NotEmpty(t, arch, "archive published at shutdown")
}

// TestCoordinationOverNATS: with coordination.nats_url the worker opens
// the job's JetStream KV buckets on a real (in-process) nats-server and
// keeps its presence lease there, renewed; a graceful stop withdraws it.
func TestCoordinationOverNATS(t *testing.T) {
	srv, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	require.NoError(t, err)
	go srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second))
	defer srv.Shutdown()
	k, err := devstack.StartKafka(devstack.KafkaTopic{Name: "readings", Partitions: 1})
	require.NoError(t, err)
	defer k.Close()
	t.Setenv("KAFKA_BROKERS", k.Addrs()[0])
	t.Setenv("STATE_DIR", t.TempDir())
	cfg := worker.PipelineConfig{WorkerID: "c1", Coordination: worker.CoordinationConfig{NATSURL: srv.ClientURL(), Job: "worker-test", LeaseTTL: 2 * time.Second}}
	p, err := pipeline.Load(spec("sma-readings.yaml"))
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- worker.RunPipeline(ctx, p, cfg, slog.New(slog.DiscardHandler), nil) }()

	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	var kv *natskv.Store
	require.Eventually(t, func() bool {
		octx, ocancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ocancel()
		kv, err = natskv.Open(octx, js, "worker-test", natskv.WithLeaseTTL(2*time.Second), natskv.WithCreateBuckets(false))
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "the worker did not create the job's buckets")
	presence := func() (coordination.Entry, bool) {
		e, err := kv.Get(context.Background(), coordination.Ephemeral, "worker.c1")
		return e, err == nil
	}
	var first coordination.Entry
	require.Eventually(t, func() bool { var ok bool; first, ok = presence(); return ok }, 30*time.Second, 20*time.Millisecond, "no presence lease for c1 in NATS")
	require.Eventually(t, func() bool {
		e, ok := presence()
		return ok && e.Revision > first.Revision
	}, 30*time.Second, 50*time.Millisecond, "the presence lease is not renewed")

	cancel()
	require.NoError(t, <-done)
	_, ok := presence()
	require.False(t, ok, "a graceful stop withdraws the presence lease")
}

// startWaitingForStore runs the SMA spec's worker (id workerID) with
// its coordination store at natsURL (job), where no store answers, and
// waits until it has said retries times that it waits for the store,
// and has not stopped. cancel stops it; done gets what it returned.
func startWaitingForStore(t *testing.T, workerID, job, natsURL string, retries int) (logs *logtest.Buffer, done chan error, cancel context.CancelFunc) {
	t.Helper()
	k, err := devstack.StartKafka(devstack.KafkaTopic{Name: "readings", Partitions: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = k.Close() })
	t.Setenv("KAFKA_BROKERS", k.Addrs()[0])
	t.Setenv("STATE_DIR", t.TempDir())
	cfg := worker.PipelineConfig{WorkerID: workerID, Coordination: worker.CoordinationConfig{NATSURL: natsURL, Job: job, LeaseTTL: 2 * time.Second}}
	p, err := pipeline.Load(spec("sma-readings.yaml"))
	require.NoError(t, err)
	logs = &logtest.Buffer{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done = make(chan error, 1)
	go func() {
		done <- worker.RunPipeline(ctx, p, cfg, slog.New(slog.NewTextHandler(logs, nil)), nil)
	}()
	var stopErr error
	stopped := false
	require.Eventually(t, func() bool {
		select {
		case stopErr = <-done:
			stopped = true
			return true
		default:
		}
		return strings.Count(logs.String(), "coordination store unreachable") >= retries
	}, 30*time.Second, 20*time.Millisecond, "the worker does not say it waits for the coordination store\n%s", logs.String())
	require.False(t, stopped, "the worker stopped while its coordination store was not there: %v", stopErr)
	return logs, done, cancel
}

// TestWorkerWaitsForTheCoordinationStore: a worker started while its
// coordination store (NATS) was down exited at once ("nats: no servers
// available for connection"), so a worker restarted during a NATS outage
// stayed down unless something restarted it again. It now waits for the
// store, saying so, and registers its presence once the server is up.
func TestWorkerWaitsForTheCoordinationStore(t *testing.T) {
	addr := freePort(t) // nothing listens there yet
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	logs, done, cancel := startWaitingForStore(t, "late-1", "wait-test", "nats://"+addr, 1)

	p2, err := strconv.Atoi(port)
	require.NoError(t, err)
	srv, err := natsserver.NewServer(&natsserver.Options{Host: host, Port: p2, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	require.NoError(t, err)
	go srv.Start()
	require.True(t, srv.ReadyForConnections(10*time.Second))
	defer srv.Shutdown()
	nc, err := nats.Connect(srv.ClientURL())
	require.NoError(t, err)
	defer nc.Close()
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		octx, ocancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer ocancel()
		kv, err := natskv.Open(octx, js, "wait-test", natskv.WithLeaseTTL(2*time.Second), natskv.WithCreateBuckets(false))
		if err != nil {
			return false
		}
		_, err = kv.Get(octx, coordination.Ephemeral, "worker.late-1")
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "no presence lease for late-1 once NATS is up\n%s", logs.String())

	cancel()
	require.NoError(t, <-done)
}

// TestWorkerWaitsForACoordinationStoreNameThatDoesNotResolveYet: a
// store whose host name did not resolve (a compose service or a
// Kubernetes Service not up yet; here a name under .invalid, which never
// resolves) stopped the worker at once ("dial tcp: lookup nats ...: no
// such host"), though a worker waits for its store while no server is
// reachable. It now waits for it as for a server that refuses, saying so,
// until it is stopped.
func TestWorkerWaitsForACoordinationStoreNameThatDoesNotResolveYet(t *testing.T) {
	logs, done, cancel := startWaitingForStore(t, "late-dns", "wait-dns", "nats://tflo-nats.invalid:4222", 2) // 2: it retried
	require.Contains(t, logs.String(), "store=nats://tflo-nats.invalid:4222")

	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the worker waiting for its coordination store did not stop when asked")
	}
}

// TestTemporalMetricsOnTheWorkersRegistry: with a Temporal address the
// worker's client sends the SDK's metrics into the worker's registry
// (internal/temporalclient.WithMetrics), so /metrics shows
// schedule-to-start latency beside the pipeline's own metrics. The
// worker config's temporal section is internal/temporalclient's Config.
func TestTemporalMetricsOnTheWorkersRegistry(t *testing.T) {
	srv := temporaltest.Start(t)
	k, err := devstack.StartKafka(devstack.KafkaTopic{Name: "readings", Partitions: 1}, devstack.KafkaTopic{Name: "readings.sma", Partitions: 1})
	require.NoError(t, err)
	defer k.Close()
	t.Setenv("KAFKA_BROKERS", k.Addrs()[0])
	t.Setenv("STATE_DIR", t.TempDir())
	cfg := worker.PipelineConfig{WorkerID: "m1", Temporal: temporalclient.Config{Address: srv.HostPort, KeyPath: "temporal"}, ControlWorker: true}
	p, err := pipeline.Load(spec("sma-readings.yaml"))
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- worker.RunPipeline(ctx, p, cfg, slog.New(slog.DiscardHandler), reg) }()
	families := func() map[string]bool {
		fams, err := reg.Gather()
		require.NoError(t, err)
		names := map[string]bool{}
		for _, f := range fams {
			names[f.GetName()] = true
		}
		return names
	}
	require.Eventually(t, func() bool {
		names := families()
		return names["temporal_activity_schedule_to_start_latency_seconds"] && names["tflo_pipeline_records_in_total"]
	}, 60*time.Second, 50*time.Millisecond, "the SDK's metrics (the lease activity's schedule-to-start) are not on the worker's registry: %v", families())
	cancel()
	require.NoError(t, <-done)
}

// TestSecretVariablesUnderThePrefix: a variable a *_env key names (the
// one holding a secret) may itself be a TFLO_ one; it is not refused as
// a variable that names no key, in the config or in the spec. Bug: the
// worker refused to start, "environment TFLO_INFLUX_TOKEN: matches no
// configuration key", though its own config named it.
func TestSecretVariablesUnderThePrefix(t *testing.T) {
	cfg := writeFile(t, "c.yaml", "temporal:\n  address: 127.0.0.1:1\nbackfill:\n  influx_url: http://127.0.0.1:1\n  token_env: TFLO_INFLUX_TOKEN\n")
	b, err := os.ReadFile(spec("market-data.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(b), "token_env: INFLUX_TOKEN")
	p := writeFile(t, "p.yaml", strings.Replace(string(b), "token_env: INFLUX_TOKEN", "token_env: TFLO_MARKET_TOKEN", 1))
	t.Setenv("TFLO_INFLUX_TOKEN", "secret")
	t.Setenv("TFLO_MARKET_TOKEN", "secret")
	var errOut bytes.Buffer
	require.Equal(t, worker.ExitOK, worker.RunMain(worker.PipelineMain(), []string{"--config", cfg, "--pipeline", p, "--check"}, &errOut), errOut.String())
	// A variable nothing names is still refused.
	t.Setenv("TFLO_INFLUX_TOKN", "secret")
	errOut.Reset()
	require.Equal(t, worker.ExitUsage, worker.RunMain(worker.PipelineMain(), []string{"--config", cfg, "--pipeline", p, "--check"}, &errOut))
	require.Contains(t, errOut.String(), "environment TFLO_INFLUX_TOKN: matches no configuration key")
	require.NotContains(t, errOut.String(), "TFLO_INFLUX_TOKEN:")
	require.NotContains(t, errOut.String(), "TFLO_MARKET_TOKEN:")
}

// TestBackfillRefusesAnUnsetTokenVariable: backfill.token_env naming a
// variable that is unset or empty stops the worker with an error naming
// the key and the variable, rather than backfills failing later without
// credentials; --check, which needs no secret, still passes.
func TestBackfillRefusesAnUnsetTokenVariable(t *testing.T) {
	t.Setenv("TFLO_TEST_BACKFILL_TOKEN", "")
	cfg := writeFile(t, "c.yaml", "temporal:\n  address: 127.0.0.1:1\nbackfill:\n  influx_url: http://127.0.0.1:1\n  token_env: TFLO_TEST_BACKFILL_TOKEN\n")
	t.Setenv("STATE_DIR", t.TempDir())
	var errOut bytes.Buffer
	require.Equal(t, worker.ExitOK, worker.RunMain(worker.PipelineMain(), []string{"--config", cfg, "--pipeline", spec("sma-readings.yaml"), "--check"}, &errOut), errOut.String())
	errOut.Reset()
	require.Equal(t, worker.ExitUsage, worker.RunMain(worker.PipelineMain(), []string{"--config", cfg, "--pipeline", spec("sma-readings.yaml")}, &errOut), errOut.String())
	require.Contains(t, errOut.String(), "backfill.token_env names TFLO_TEST_BACKFILL_TOKEN, which is unset or empty")
}

// envDrainChild selects TestChildDrainsForever in the child process of
// TestSecondSignalStopsAtOnce.
const envDrainChild = "TFLO_TEST_DRAIN_CHILD"

// TestChildDrainsForever is not a test on its own: it is the process
// TestSecondSignalStopsAtOnce signals, a main whose drain never ends (a
// final checkpoint stuck on a sink that does not answer).
func TestChildDrainsForever(t *testing.T) {
	if os.Getenv(envDrainChild) == "" {
		t.Skip("child process of TestSecondSignalStopsAtOnce")
	}
	m := worker.Main{Name: "worker", Config: &worker.PipelineConfig{}, Run: func(ctx context.Context, _ worker.Runtime) error {
		fmt.Fprintln(os.Stderr, "running")
		<-ctx.Done()
		fmt.Fprintln(os.Stderr, "draining")
		time.Sleep(time.Hour)
		return nil
	}}
	os.Exit(worker.RunMain(m, nil, os.Stderr))
}

// TestSecondSignalStopsAtOnce: the first SIGINT starts the drain; a
// second one while it drains exits 130 at once, saying so. Bug:
// signal.NotifyContext kept catching the signal, so a second Ctrl-C was
// ignored and a stuck drain could only be killed.
func TestSecondSignalStopsAtOnce(t *testing.T) {
	if os.Getenv(envDrainChild) != "" {
		t.Skip("in the child")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildDrainsForever$", "-test.count=1")
	cmd.Env = append(os.Environ(), envDrainChild+"=1")
	var errOut logtest.Buffer
	cmd.Stderr = &errOut
	require.NoError(t, cmd.Start())
	var waitErr error
	exited := make(chan struct{})
	go func() { waitErr = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	require.Eventually(t, func() bool { return strings.Contains(errOut.String(), "running\n") }, 30*time.Second, 10*time.Millisecond, errOut.String())
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	require.Eventually(t, func() bool { return strings.Contains(errOut.String(), "draining\n") }, 30*time.Second, 10*time.Millisecond, errOut.String())
	select {
	case <-exited:
		t.Fatalf("the first SIGINT stopped the worker before its drain ended: %v\n%s", waitErr, errOut.String())
	default:
	}
	require.NoError(t, cmd.Process.Signal(os.Interrupt))
	select {
	case <-exited:
		var ee *exec.ExitError
		require.ErrorAs(t, waitErr, &ee, errOut.String())
		require.Equal(t, worker.ExitInterrupted, ee.ExitCode(), errOut.String())
		require.Contains(t, errOut.String(), "worker: interrupted again while draining: stopping at once, without the final checkpoint")
	case <-time.After(30 * time.Second):
		t.Fatalf("the second SIGINT was ignored: the worker still drains\n%s", errOut.String())
	}
}

// TestSIGTERMWhileStartingExitsZero: SIGTERM while the worker starts (its
// Kafka sink connecting to a broker that does not answer yet) stops it
// with exit 0, as it does while it waits for the coordination store or
// serves. Bug: the cancelled connect came back as the worker's error,
// "stopped with an error ... connect: context canceled", exit 1, and a
// supervisor took the requested stop for a failure.
func TestSIGTERMWhileStartingExitsZero(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0") // accepts, never answers
	require.NoError(t, err)
	defer ln.Close()
	dialled := make(chan struct{}, 1)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			select {
			case dialled <- struct{}{}:
			default:
			}
		}
	}()
	t.Setenv("KAFKA_BROKERS", ln.Addr().String())
	t.Setenv("STATE_DIR", t.TempDir())
	done := make(chan int, 1)
	var errOut logtest.Buffer
	go func() {
		done <- worker.RunMain(worker.PipelineMain(), []string{"--pipeline", spec("sma-readings.yaml")}, &errOut)
	}()
	select {
	case <-dialled:
	case code := <-done:
		t.Fatalf("the worker exited %d before it dialled the broker\n%s", code, errOut.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker did not dial the broker\n%s", errOut.String())
	}
	stopWithSIGTERM(t, done, &errOut, 30*time.Second)
	require.NotContains(t, errOut.String(), "stopped with an error")
}

// TestCentralArchiveReadsEveryS3Variable: the central spec's archive sink
// is reached as tflo's S3 settings for archives say, every TFLO_S3_*
// variable archiveloc.S3FromEnv reads (the backfills read the pipeline's
// own archive with the sink's settings too). Bug: the spec mapped all but
// TFLO_S3_CA_FILE, so an S3 server signed by a private CA was not
// trusted by the archive sink nor by backfills of its archive, though the
// README names the variable for that.
func TestCentralArchiveReadsEveryS3Variable(t *testing.T) {
	want := archiveloc.S3{Endpoint: "https://s3.internal:7070", Region: "eu-1", AccessKeyEnv: "ARCHIVE_AK", SecretKeyEnv: "ARCHIVE_SK", CAFile: writeFile(t, "ca.pem", ""),
		ResponseTimeout: 90 * time.Second}
	for k, v := range map[string]string{archiveloc.EnvEndpoint: want.Endpoint, archiveloc.EnvRegion: want.Region, archiveloc.EnvAccessKeyEnv: want.AccessKeyEnv,
		archiveloc.EnvSecretKeyEnv: want.SecretKeyEnv, archiveloc.EnvCAFile: want.CAFile, archiveloc.EnvResponseTimeout: "1m30s", "ARCHIVE_LOCATION": "s3://archive/central"} {
		t.Setenv(k, v)
	}
	c, err := archiveloc.S3FromEnv(os.LookupEnv)
	require.NoError(t, err)
	require.Equal(t, want, c, "every variable S3FromEnv reads is set")
	p, err := pipeline.Load(spec("iot-portal-central.yaml"))
	require.NoError(t, err)
	var got []archiveloc.S3
	for _, s := range p.Sinks {
		if a, ok := s.(pipeline.ArchiveSink); ok {
			got = append(got, a.S3)
		}
	}
	require.Equal(t, []archiveloc.S3{want}, got)
}

// TestS3ResponseTimeoutVariable: TFLO_S3_RESPONSE_TIMEOUT (the backfills'
// archives' response timeout) is a variable the worker knows, and a bad
// value stops it before it starts, naming the variable and the value.
func TestS3ResponseTimeoutVariable(t *testing.T) {
	t.Setenv(archiveloc.EnvResponseTimeout, "90s")
	var errOut bytes.Buffer
	require.Equal(t, worker.ExitOK, worker.RunMain(worker.PipelineMain(), []string{"--pipeline", spec("market-data.yaml"), "--check"}, &errOut), errOut.String())
	t.Setenv(archiveloc.EnvResponseTimeout, "-5s")
	errOut.Reset()
	require.Equal(t, worker.ExitUsage, worker.RunMain(worker.PipelineMain(), []string{"--pipeline", spec("market-data.yaml"), "--check"}, &errOut))
	require.Contains(t, errOut.String(), `TFLO_S3_RESPONSE_TIMEOUT "-5s": negative (unset or 0: the default, 1m0s)`)
}

// TestS3KeyVariablesUnderThePrefix: the variables TFLO_S3_ACCESS_KEY_ENV
// and TFLO_S3_SECRET_KEY_ENV name (the keys backfills read s3://
// archives with) may be TFLO_ ones, as a *_env key's may. Bug: the
// worker refused to start, "environment TFLO_ARCHIVE_KEY: matches no
// configuration key", though its S3 settings named it.
func TestS3KeyVariablesUnderThePrefix(t *testing.T) {
	t.Setenv(archiveloc.EnvAccessKeyEnv, "TFLO_ARCHIVE_KEY")
	t.Setenv(archiveloc.EnvSecretKeyEnv, "TFLO_ARCHIVE_SECRET")
	t.Setenv("TFLO_ARCHIVE_KEY", "ak")
	t.Setenv("TFLO_ARCHIVE_SECRET", "sk")
	var errOut bytes.Buffer
	require.Equal(t, worker.ExitOK, worker.RunMain(worker.PipelineMain(), []string{"--pipeline", spec("market-data.yaml"), "--check"}, &errOut), errOut.String())
	// A variable nothing names is still refused.
	t.Setenv("TFLO_ARCHIVE_KY", "ak")
	errOut.Reset()
	require.Equal(t, worker.ExitUsage, worker.RunMain(worker.PipelineMain(), []string{"--pipeline", spec("market-data.yaml"), "--check"}, &errOut))
	require.Contains(t, errOut.String(), "environment TFLO_ARCHIVE_KY: matches no configuration key")
	require.NotContains(t, errOut.String(), "TFLO_ARCHIVE_KEY:")
}

// TestOperatorsGoesWithConfig: --operators with --config (a deployment's
// file) lists the types, as it does alone; other flags are refused
// (TestRunMainUsage).
func TestOperatorsGoesWithConfig(t *testing.T) {
	cfg := writeFile(t, "c.yaml", "worker_id: w\n")
	var code int
	var errOut bytes.Buffer
	out := stdout(t, func() {
		code = worker.RunMain(worker.PipelineMain(), []string{"--config", cfg, "--operators"}, &errOut)
	})
	require.Equal(t, worker.ExitOK, code, errOut.String())
	require.Contains(t, out, "sma — ")
}
