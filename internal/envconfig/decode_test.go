package envconfig

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
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
	got := problems(t, err)
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
// open x.yaml: no such file or directory", the path twice; and "config
// file" named a missing pipeline spec a config file.
func TestLoadMissingFileSaysItOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "absent.yaml")
	err := Load(path, Prefix, &spec{})
	require.ErrorIs(t, err, fs.ErrNotExist)
	require.Equal(t, "file "+path+": no such file or directory", err.Error())
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

// TestExpandLeavesTrailingComments: a ${NAME} in a line's trailing
// comment was expanded, so an unset variable named in a comment ("# or
// ${INFLUX_URL}") refused the file. A trailing comment is left as it is
// now, and a # inside quotes or a block scalar is still text.
func TestExpandLeavesTrailingComments(t *testing.T) {
	env := map[string]string{"B": "k:9092", "T": "t"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	in := strings.Join([]string{
		`brokers: ${B}  # or ${UNSET}`,
		`tag: "a #${T}" # ${UNSET}`,
		`single: 'it''s #${T}'`,
		`hash: a#${T}`,
		`text: |`,
		`  line # ${T}`,
		``,
		`  # ${T} is text here`,
		`after: 1 # ${UNSET}`,
		`list:`,
		`  - note: >-`,
		`      folded # ${T}`,
		`    next: ${T} # ${UNSET}`,
		`  - ${T} # ${UNSET}`,
	}, "\n")
	out, err := Expand([]byte(in), lookup)
	require.NoError(t, err)
	require.Equal(t, strings.Join([]string{
		`brokers: k:9092  # or ${UNSET}`,
		`tag: "a #t" # ${UNSET}`,
		`single: 'it''s #t'`,
		`hash: a#t`,
		`text: |`,
		`  line # t`,
		``,
		`  # t is text here`,
		`after: 1 # ${UNSET}`,
		`list:`,
		`  - note: >-`,
		`      folded # t`,
		`    next: t # ${UNSET}`,
		`  - t # ${UNSET}`,
	}, "\n"), string(out))
}

// TestExpandInAListItemsBlockScalar: a list item that is itself a block
// scalar ("- |") has its text indented past the dash only; that text
// was taken for code, so a ${NAME} after a # in it, or on a line
// starting with #, was left unexpanded as if in a comment.
func TestExpandInAListItemsBlockScalar(t *testing.T) {
	lookup := func(k string) (string, bool) { v, ok := map[string]string{"T": "t"}[k]; return v, ok }
	in := strings.Join([]string{
		`scripts:`,
		`- |`,
		`  line # ${T}`,
		`  # ${T} is text here`,
		`- - >-`,
		`    # ${T}`,
		`after: 1 # ${UNSET}`,
	}, "\n")
	out, err := Expand([]byte(in), lookup)
	require.NoError(t, err)
	require.Equal(t, strings.Join([]string{
		`scripts:`,
		`- |`,
		`  line # t`,
		`  # t is text here`,
		`- - >-`,
		`    # t`,
		`after: 1 # ${UNSET}`,
	}, "\n"), string(out))
}

// sinkEntry takes, beside its kafka key, keys of the types in plugins.
type sinkEntry struct {
	Kafka *struct {
		Topic string `yaml:"topic"`
	} `yaml:"kafka"`
	Other map[string]any `yaml:",inline"`
}

var plugins = []string{"webhook", "log"}

func (s *sinkEntry) Extend(key string, value *yaml.Node) bool {
	if !slices.Contains(plugins, key) {
		return false
	}
	var v any
	if err := value.Decode(&v); err != nil {
		return false
	}
	if s.Other == nil {
		s.Other = map[string]any{}
	}
	s.Other[key] = v
	return true
}

func (s *sinkEntry) Extensions() []string { return plugins }

// TestExtensibleTakesItsKeys: a type implementing Extensible takes the
// keys it knows beyond its fields, with the lines of what is under them
// recorded (so Print gives their origins, the inline map flattened under
// the entry's path); a key neither a field nor one it takes is refused,
// the message naming both kinds.
func TestExtensibleTakesItsKeys(t *testing.T) {
	src := `sinks:
  - kafka: {topic: out}
  - webhook:
      url: https://example.com/hook
      retries: [1s, 2s]
  - hook: {url: x}
`
	var s struct {
		Sinks []sinkEntry `yaml:"sinks"`
	}
	origins, err := DecodeOrigins([]byte(src), "spec.yaml", &s)
	var es *Errors
	require.ErrorAs(t, err, &es)
	require.Len(t, es.Problems, 1)
	require.Equal(t, Problem{Path: "sinks[2].hook", Line: 6, Msg: "unknown key (known here: kafka, webhook, log)"}, es.Problems[0])
	require.Equal(t, "out", s.Sinks[0].Kafka.Topic)
	require.Equal(t, map[string]any{"webhook": map[string]any{"url": "https://example.com/hook", "retries": []any{"1s", "2s"}}}, s.Sinks[1].Other)

	s.Sinks = s.Sinks[:2]
	var b strings.Builder
	require.NoError(t, Print(&b, s, origins))
	require.Equal(t, `sinks[0].kafka.topic = "out"                       # spec.yaml:2
sinks[1].webhook.retries[0] = "1s"                 # spec.yaml:5
sinks[1].webhook.retries[1] = "2s"                 # spec.yaml:5
sinks[1].webhook.url = "https://example.com/hook"  # spec.yaml:4
`, b.String())
}

// TestDecodeRefusesFractionForInteger: a fraction given to an integer
// key is an error naming the key, not truncated (sensors: 2.9 was 2);
// a whole number written as a float (1e3) is the integer.
func TestDecodeRefusesFractionForInteger(t *testing.T) {
	var c struct {
		N int    `yaml:"n"`
		U uint16 `yaml:"u"`
		M int    `yaml:"m"`
		I int64  `yaml:"i"`
	}
	err := Decode([]byte("n: 2.9\nu: 1.5\nm: 1e3\ni: -.inf\n"), &c)
	got := problems(t, err)
	require.Equal(t, []string{
		`line 1: n: "2.9" is not an integer`,
		`line 2: u: "1.5" is not a non-negative integer of 16 bits`,
		`line 4: i: "-.inf" is not an integer`,
	}, got)
	require.Equal(t, 1000, c.M)
}

// TestDecodeRefusesAFloatOutOfTheIntegersRange: a whole number written
// as a float outside the key's type is an error naming the key, not
// wrapped by the conversion (-1.0 was 2⁶⁴-1 in a uint64, -1e30 was -2⁶³
// in an int64); one just inside the range is the integer.
func TestDecodeRefusesAFloatOutOfTheIntegersRange(t *testing.T) {
	var c struct {
		U   uint64 `yaml:"u"`
		Big uint64 `yaml:"big"`
		I   int64  `yaml:"i"`
		Neg int    `yaml:"neg"`
		Top int64  `yaml:"top"`
		In  int64  `yaml:"in"`
		U8  uint8  `yaml:"u8"`
	}
	err := Decode([]byte(`u: -1.0
big: 18446744073709551616
i: 9.223372036854775807e18
neg: -1e30
top: 9.2e18
in: -9.223372036854775808e18
u8: 255.0
`), &c)
	got := problems(t, err)
	require.Equal(t, []string{
		`line 1: u: "-1.0" is not a non-negative integer of 64 bits`,
		`line 2: big: "18446744073709551616" is not a non-negative integer of 64 bits`,
		`line 3: i: "9.223372036854775807e18" is not an integer`,
		`line 4: neg: "-1e30" is not an integer`,
	}, got)
	require.Zero(t, c.U)
	require.Zero(t, c.Big)
	require.Zero(t, c.I)
	require.Zero(t, c.Neg)
	require.Equal(t, int64(9.2e18), c.Top)
	require.Equal(t, int64(math.MinInt64), c.In)
	require.Equal(t, uint8(255), c.U8)
}

// TestDecodeRefusesANumberPastAFloat32: a number past a float32 key's
// range is an error naming the key, as its variable's is, not +Inf;
// .inf is still infinity.
func TestDecodeRefusesANumberPastAFloat32(t *testing.T) {
	var c struct {
		F   float32 `yaml:"f"`
		Inf float32 `yaml:"inf"`
		D   float64 `yaml:"d"`
	}
	err := Decode([]byte("f: 1e40\ninf: -.inf\nd: 1e40\n"), &c)
	var es *Errors
	require.ErrorAs(t, err, &es)
	require.Len(t, es.Problems, 1)
	require.Equal(t, `line 1: f: "1e40" is out of the range of float32`, es.Problems[0].String())
	require.Zero(t, c.F)
	require.True(t, math.IsInf(float64(c.Inf), -1))
	require.Equal(t, 1e40, c.D)
}

// TestDecodeRefusesASecondDocument: a second YAML document in a file
// (after ---) is a problem naming its line, not ignored with everything
// it sets; a leading --- and a trailing empty one are fine.
func TestDecodeRefusesASecondDocument(t *testing.T) {
	var s spec
	err := Decode([]byte("window: 3\n---\nwindow: 5\nbogus: 1\n"), &s)
	var es *Errors
	require.ErrorAs(t, err, &es)
	require.Len(t, es.Problems, 1)
	require.Equal(t, "line 3: a second YAML document (after ---): a file holds one", es.Problems[0].String())

	for _, src := range []string{"---\nwindow: 3\n", "window: 3\n---\n", "window: 3\n...\n", "# only a comment\n", ""} {
		s = spec{}
		require.NoError(t, Decode([]byte(src), &s), "%q", src)
	}
	require.Equal(t, 0, s.Window)
}

// problems is the text of each problem err (an *Errors) holds.
func problems(t *testing.T, err error) []string {
	t.Helper()
	var es *Errors
	require.ErrorAs(t, err, &es)
	got := make([]string, len(es.Problems))
	for i, p := range es.Problems {
		got[i] = p.String()
	}
	return got
}
