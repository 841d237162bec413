package envconfig

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type node struct {
	Name   string         `yaml:"name"`
	Params map[string]any `yaml:"params"`
	line   int
}

func (n *node) SetLine(l int) { n.line = l }

type spec struct {
	Kafka struct {
		Topic string `yaml:"topic"`
		DLQ   string `yaml:"dlq"`
	} `yaml:"kafka"`
	Window int           `yaml:"window"`
	Every  time.Duration `yaml:"every"`
	Nodes  []node        `yaml:"nodes"`
	Secret string        `yaml:"-"`
}

// ApplyDefaults derives the dead-letter topic from the topic.
func (s *spec) ApplyDefaults() {
	if s.Kafka.Topic == "" {
		s.Kafka.Topic = "readings"
	}
	if s.Kafka.DLQ == "" {
		s.Kafka.DLQ = s.Kafka.Topic + ".dlq"
	}
}

// TestDecodeReportsEveryProblem: unknown keys, values of the wrong type
// and repeated keys are all reported at once, each with its key path and
// line.
func TestDecodeReportsEveryProblem(t *testing.T) {
	src := `kafka:
  topik: trades
window: seven
every: soon
nodes:
  - name: a
    parms: {x: 1}
  - name: b
    name: c
secret: x
`
	var s spec
	err := Decode([]byte(src), &s)
	var es *Errors
	require.ErrorAs(t, err, &es)
	got := make([]string, len(es.Problems))
	for i, p := range es.Problems {
		got[i] = p.String()
	}
	require.Equal(t, []string{
		`line 2: kafka.topik: unknown key (known here: topic, dlq)`,
		`line 3: window: "seven" is not an integer`,
		`line 4: every: "soon" is not a duration like 10s or 1m30s`,
		`line 7: nodes[0].parms: unknown key (known here: name, params)`,
		`line 9: nodes[1].name: repeated key`,
		`line 10: secret: unknown key (known here: kafka, window, every, nodes)`,
	}, got)
	require.Contains(t, err.Error(), "6 problems")
}

func TestDecodeGood(t *testing.T) {
	var s spec
	require.NoError(t, Decode([]byte("window: 3\nevery: 1m\nnodes:\n  - name: a\n    params: {x: 1, y: [2]}\n  - name: b\n"), &s))
	require.Equal(t, 3, s.Window)
	require.Equal(t, time.Minute, s.Every)
	require.Len(t, s.Nodes, 2)
	require.Equal(t, 4, s.Nodes[0].line, "SetLine gets the line of the node's mapping")
	require.Equal(t, 6, s.Nodes[1].line)
	require.Equal(t, map[string]any{"x": 1, "y": []any{2}}, s.Nodes[0].Params)
	require.NoError(t, Decode(nil, &s))
}

// TestLoadAppliesDefaultsAfterTheFile: a default that depends on another
// key is applied after the file and the environment. The bug (issue 15):
// the central worker's defaults ran before its YAML, so `kafka.topic:
// trades` kept the dead-letter topic of the default topic, readings.dlq.
func TestLoadAppliesDefaultsAfterTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("kafka:\n  topic: trades\n"), 0o600))
	var s spec
	require.NoError(t, Load(path, Prefix, &s))
	require.Equal(t, "trades", s.Kafka.Topic)
	require.Equal(t, "trades.dlq", s.Kafka.DLQ)

	t.Setenv("TFLO_KAFKA_TOPIC", "quotes")
	s = spec{}
	require.NoError(t, Load(path, Prefix, &s))
	require.Equal(t, "quotes.dlq", s.Kafka.DLQ, "the environment is read before the defaults too")
}

func TestLoadNamesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("kafka:\n  topic: [a]\n"), 0o600))
	err := Load(path, Prefix, &spec{})
	require.ErrorContains(t, err, path+": line 2: kafka.topic: want a string, got a list")
}

// TestLoadMissingFileSaysItOnce: a missing file read "config x.yaml:
// open x.yaml: no such file or directory", the path twice.
func TestLoadMissingFileSaysItOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent.yaml")
	err := Load(path, Prefix, &spec{})
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.Equal(t, "config file "+path+": no such file or directory", err.Error())
}

func TestExpand(t *testing.T) {
	env := map[string]string{"BROKERS": "k:9092", "EMPTY": ""}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	out, err := Expand([]byte("a: ${BROKERS}\nb: ${MISSING:-x:1}\nc: ${EMPTY:-d}\nd: '${EMPTY}'\ne: $topic\n# ${UNSET} in a comment\n"), lookup)
	require.NoError(t, err)
	require.Equal(t, "a: k:9092\nb: x:1\nc: d\nd: ''\ne: $topic\n# ${UNSET} in a comment\n", string(out))
	_, err = Expand([]byte("a: 1\nb: ${UNSET}\n"), lookup)
	var es *Errors
	require.True(t, errors.As(err, &es))
	require.Equal(t, 2, es.Problems[0].Line)
	require.True(t, strings.Contains(err.Error(), "${UNSET}"))
}
