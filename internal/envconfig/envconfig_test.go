package envconfig

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type textDur time.Duration

func (d *textDur) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	*d = textDur(v)
	return err
}

type tls struct {
	CAFile string `yaml:"ca_file"`
}

type sample struct {
	WorkerID string `yaml:"worker_id"`
	Kafka    struct {
		Brokers []string `yaml:"brokers"`
		Topic   string   `yaml:"topic"`
	} `yaml:"kafka"`
	Window   int           `yaml:"window"`
	Ratio    float64       `yaml:"ratio"`
	On       bool          `yaml:"on"`
	Every    time.Duration `yaml:"every"`
	Interval textDur       `yaml:"interval"`
	TLS      *tls          `yaml:"tls,omitempty"`
	Secret   string        `yaml:"-"`
	Count    uint16        `yaml:"count"`
}

func TestName(t *testing.T) {
	for _, c := range []struct {
		path []string
		want string
	}{
		{[]string{"kafka", "brokers"}, "TFLO_KAFKA_BROKERS"},
		{[]string{"temporal", "tls", "ca_file"}, "TFLO_TEMPORAL_TLS_CA_FILE"},
		{[]string{"dlq-topic"}, "TFLO_DLQ_TOPIC"},
		{[]string{"x9"}, "TFLO_X9"},
	} {
		require.Equal(t, c.want, Name(Prefix, c.path...))
	}
}

func TestApply(t *testing.T) {
	for _, c := range []struct {
		name    string
		env     map[string]string
		check   func(t *testing.T, s sample)
		wantErr string
	}{
		{"brokers list", map[string]string{"TFLO_KAFKA_BROKERS": "a:1, b:2,"}, func(t *testing.T, s sample) {
			require.Equal(t, []string{"a:1", "b:2"}, s.Kafka.Brokers)
		}, ""},
		{"scalars", map[string]string{"TFLO_WINDOW": "7", "TFLO_RATIO": "0.25", "TFLO_ON": "true", "TFLO_COUNT": "9"}, func(t *testing.T, s sample) {
			require.Equal(t, 7, s.Window)
			require.Equal(t, 0.25, s.Ratio)
			require.True(t, s.On)
			require.Equal(t, uint16(9), s.Count)
		}, ""},
		{"durations", map[string]string{"TFLO_EVERY": "1m", "TFLO_INTERVAL": "3s"}, func(t *testing.T, s sample) {
			require.Equal(t, time.Minute, s.Every)
			require.Equal(t, textDur(3*time.Second), s.Interval)
		}, ""},
		{"nil section allocated when set", map[string]string{"TFLO_TLS_CA_FILE": "/ca.pem"}, func(t *testing.T, s sample) {
			require.NotNil(t, s.TLS)
			require.Equal(t, "/ca.pem", s.TLS.CAFile)
		}, ""},
		{"nil section stays nil", map[string]string{}, func(t *testing.T, s sample) { require.Nil(t, s.TLS) }, ""},
		{"empty value clears the key", map[string]string{"TFLO_WORKER_ID": ""}, func(t *testing.T, s sample) { require.Empty(t, s.WorkerID) }, ""},
		{"secret has no variable", map[string]string{"TFLO_SECRET": "x"}, func(t *testing.T, s sample) { require.Empty(t, s.Secret) }, ""},
		{"bad int names the variable", map[string]string{"TFLO_WINDOW": "seven"}, nil, "TFLO_WINDOW"},
		{"bad duration names the path", map[string]string{"TFLO_EVERY": "soon"}, nil, "(every)"},
		{"overflow", map[string]string{"TFLO_COUNT": "70000"}, nil, "TFLO_COUNT"},
		// As a file's YAML reads them; refused before.
		{"yes is true", map[string]string{"TFLO_ON": "yes"}, func(t *testing.T, s sample) { require.True(t, s.On) }, ""},
		{"On is true", map[string]string{"TFLO_ON": "On"}, func(t *testing.T, s sample) { require.True(t, s.On) }, ""},
		{"off is false", map[string]string{"TFLO_ON": "off"}, func(t *testing.T, s sample) { require.False(t, s.On) }, ""},
		{"a bad bool names the variable and the words", map[string]string{"TFLO_ON": "maybe"}, nil, `TFLO_ON (on): "maybe": not a bool (true/false, yes/no, on/off, 1/0)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := sample{WorkerID: "from-file"}
			err := Apply(Prefix, &s, func(k string) (string, bool) { v, ok := c.env[k]; return v, ok })
			if c.wantErr != "" {
				require.ErrorContains(t, err, c.wantErr)
				return
			}
			require.NoError(t, err)
			c.check(t, s)
		})
	}
}

func TestKeys(t *testing.T) {
	keys, err := Keys(Prefix, sample{})
	require.NoError(t, err)
	var envs []string
	for _, k := range keys {
		envs = append(envs, k.Env)
	}
	require.Equal(t, []string{"TFLO_WORKER_ID", "TFLO_KAFKA_BROKERS", "TFLO_KAFKA_TOPIC", "TFLO_WINDOW", "TFLO_RATIO", "TFLO_ON",
		"TFLO_EVERY", "TFLO_INTERVAL", "TFLO_TLS_CA_FILE", "TFLO_COUNT"}, envs)
	keys, err = Keys(Prefix, struct {
		M    map[string]int
		L    []struct{ A int }
		Name string `yaml:"name"`
	}{})
	require.NoError(t, err, "lists of sections and maps have no variable; they are set in the file")
	require.Equal(t, []Key{{Env: "TFLO_NAME", Path: "name", Type: "string"}}, keys)
	_, err = Keys(Prefix, 3)
	require.Error(t, err)
}

// TestLoad: the file is read strictly (an unknown key is an error) and
// the environment wins over it.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	require.NoError(t, os.WriteFile(good, []byte("worker_id: w1\nkafka:\n  brokers: [x:1]\n  topic: t\nevery: 2s\n"), 0o600))
	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("kafka:\n  brokerz: [x:1]\n"), 0o600))

	t.Setenv("TFLO_KAFKA_TOPIC", "from-env")
	var s sample
	require.NoError(t, Load(good, Prefix, &s))
	require.Equal(t, "w1", s.WorkerID)
	require.Equal(t, []string{"x:1"}, s.Kafka.Brokers)
	require.Equal(t, "from-env", s.Kafka.Topic)
	require.Equal(t, 2*time.Second, s.Every)

	require.ErrorContains(t, Load(bad, Prefix, &sample{}), "brokerz")
	require.ErrorContains(t, Load(filepath.Join(dir, "missing.yaml"), Prefix, &sample{}), "missing.yaml")
	empty := filepath.Join(dir, "empty.yaml")
	require.NoError(t, os.WriteFile(empty, nil, 0o600))
	require.NoError(t, Load(empty, Prefix, &sample{}))
	require.Error(t, Apply(Prefix, sample{}, os.LookupEnv))
}

// TestLoadReportsEveryProblemAtOnce: a bad duration in the file stopped
// the load before the environment was read, so a bad variable showed only
// on the next run; every problem of both is reported at once, the file's
// with its key path and line, the environment's with its variable.
func TestLoadReportsEveryProblemAtOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("worker_id: w\nkafka:\n  topic: t\nevery: soon\nwindow: seven\n"), 0o600))
	t.Setenv("TFLO_INTERVAL", "later")
	t.Setenv("TFLO_COUNT", "-1")
	err := Load(path, Prefix, &sample{})
	var es *Errors
	require.ErrorAs(t, err, &es)
	require.Len(t, es.Problems, 4, "%v", err)
	msg := err.Error()
	for _, want := range []string{
		`line 4: every: "soon" is not a duration`,
		`line 5: window: "seven" is not an integer`,
		`environment TFLO_INTERVAL (interval): "later"`,
		`environment TFLO_COUNT (count): "-1"`,
		path,
	} {
		require.Contains(t, msg, want)
	}
}

// defaulted derives one key's default from another, as a DLQ topic from
// its topic.
type defaulted struct {
	Topic string `yaml:"topic"`
	DLQ   string `yaml:"dlq"`
}

func (d *defaulted) ApplyDefaults() {
	if d.Topic == "" {
		d.Topic = "readings"
	}
	if d.DLQ == "" {
		d.DLQ = d.Topic + ".dlq"
	}
}

// TestEmptyVariableClearsTheKey: the documented rule — a variable set to
// "" clears its key as if the file had not set it, and the default
// applies (after the file and the environment, so a derived default
// follows what they set).
func TestEmptyVariableClearsTheKey(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("topic: trades\ndlq: trades.bad\n"), 0o600))
	var d defaulted
	require.NoError(t, Load(path, Prefix, &d))
	require.Equal(t, defaulted{Topic: "trades", DLQ: "trades.bad"}, d)

	t.Setenv("TFLO_DLQ", "")
	d = defaulted{}
	require.NoError(t, Load(path, Prefix, &d))
	require.Equal(t, defaulted{Topic: "trades", DLQ: "trades.dlq"}, d, "empty TFLO_DLQ clears the file's dlq: the default derives from the file's topic")

	t.Setenv("TFLO_TOPIC", "")
	d = defaulted{}
	require.NoError(t, Load(path, Prefix, &d))
	require.Equal(t, defaulted{Topic: "readings", DLQ: "readings.dlq"}, d)

	t.Setenv("TFLO_EVERY", "")
	s := sample{Every: time.Minute, Window: 3}
	require.NoError(t, Apply(Prefix, &s, os.LookupEnv), "an empty duration is not a parse error: it clears")
	require.Zero(t, s.Every)
}

// TestUnknownVariables: a TFLO_ variable matching no key was ignored, so a
// typo silently left the file's value in place; it is an error naming the
// variable and the key it was probably meant for.
func TestUnknownVariables(t *testing.T) {
	keys, err := Keys(Prefix, sample{})
	require.NoError(t, err)
	env := []string{"TFLO_KAFKA_TOPC=x", "TFLO_WINDOW=3", "TFLO_S3_ENDPOINT=http://s3", "TFLO_SIMULATOR_SENSORS=4", "PATH=/bin", "TFLO_ZZZZZZZZZZZZ=1", "TFLOX=1"}
	err = Unknown(Prefix, env, keys, "TFLO_S3_ENDPOINT", "TFLO_SIMULATOR_")
	var es *Errors
	require.ErrorAs(t, err, &es)
	require.Len(t, es.Problems, 2, "%v", err)
	require.Contains(t, err.Error(), "environment TFLO_KAFKA_TOPC: matches no configuration key (did you mean TFLO_KAFKA_TOPIC?)")
	require.True(t, strings.HasSuffix(err.Error(), "environment TFLO_ZZZZZZZZZZZZ: matches no configuration key"), "no guess when nothing is close")
	require.NoError(t, Unknown(Prefix, env[1:4], keys, "TFLO_S3_ENDPOINT", "TFLO_SIMULATOR_"))
	// One problem reads as one sentence ("environment: environment X" said it twice).
	err = Unknown(Prefix, env[:1], keys)
	require.EqualError(t, err, "environment TFLO_KAFKA_TOPC: matches no configuration key (did you mean TFLO_KAFKA_TOPIC?)")
}

// TestOriginsLine: the line of a key the file set, of a section's key,
// and 0 for a key a variable set or the default left alone.
func TestOriginsLine(t *testing.T) {
	var s sample
	o, err := DecodeOrigins([]byte("worker_id: w1\nkafka:\n  brokers: [a, b]\n  topic: t\nwindow: 5\n"), "spec", &s)
	require.NoError(t, err)
	require.Equal(t, 1, o.Line("worker_id"))
	require.Equal(t, 4, o.Line("kafka.topic"))
	require.Equal(t, 3, o.Line("kafka.brokers[1]"), "an item of a list")
	require.Equal(t, 0, o.Line("ratio"), "default")
	require.Equal(t, 2, o.Line("kafka"), "a section: its key's line")
	require.Equal(t, 0, o.Line("kaf"), "not a section of kafka")
	require.Equal(t, "spec:5", o.Of("window"))
	o, err = DecodeOrigins([]byte("worker_id: w1\n\nkafka: {}\n"), "spec", &s)
	require.NoError(t, err)
	require.Equal(t, 3, o.Line("kafka"), "an empty section: its own line")
	require.Equal(t, "default", o.Of("kafka.topic"), "its keys keep their defaults")
	o, err = DecodeOrigins([]byte("kafka:\n\n  topic: t\n"), "spec", &s)
	require.NoError(t, err)
	require.Equal(t, 1, o.Line("kafka"), "a section: its key's line, not its first value's")
	require.Equal(t, "default", o.Of("kafka.brokers"), "a section's unset keys keep their defaults")

	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("worker_id: w1\nwindow: 5\n"), 0o600))
	t.Setenv("APP_WINDOW", "7")
	o, err = LoadOrigins(path, "APP", &s)
	require.NoError(t, err)
	require.Equal(t, 1, o.Line("worker_id"))
	require.Equal(t, 0, o.Line("window"), "set by APP_WINDOW: %s", o.Of("window"))
}

// TestApplyListOfNamedStrings: a list whose items are a string type of
// their own is set from a comma-separated variable (it panicked: a
// []string does not convert to it), each item through its UnmarshalText
// when it has one.
func TestApplyListOfNamedStrings(t *testing.T) {
	var c struct {
		Names  []name  `yaml:"names"`
		Levels []level `yaml:"levels"`
	}
	env := map[string]string{"TFLO_NAMES": "a, b", "TFLO_LEVELS": "low,high"}
	require.NoError(t, Apply(Prefix, &c, func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
	require.Equal(t, []name{"a", "b"}, c.Names)
	require.Equal(t, []level{"LOW", "HIGH"}, c.Levels)
	env["TFLO_LEVELS"] = "low,mid"
	err := Apply(Prefix, &c, func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	require.ErrorContains(t, err, `environment TFLO_LEVELS (levels): "low,mid": level "mid" is neither low nor high`)
}

type name string

type level string

func (l *level) UnmarshalText(b []byte) error {
	switch s := string(b); s {
	case "low", "high":
		*l = level(strings.ToUpper(s))
		return nil
	default:
		return fmt.Errorf("level %q is neither low nor high", s)
	}
}

// TestExpandedNewlinesKeepTheFileLines: a ${NAME} whose value holds
// newlines added lines before the YAML was read, so the problems and
// origins of the keys after it named lines of the expanded text, not of
// the file.
func TestExpandedNewlinesKeepTheFileLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("worker_id: \"${MULTI}\"\nkafka:\n  topic: t\nevery: soon\n"), 0o600))
	t.Setenv("MULTI", "a\nb\nc")
	err := Load(path, Prefix, &sample{})
	require.ErrorContains(t, err, `line 4: every: "soon" is not a duration`)

	require.NoError(t, os.WriteFile(path, []byte("worker_id: \"${MULTI}\"\nkafka:\n  topic: t\nwindow: 3\n"), 0o600))
	var s sample
	origins, err := LoadOrigins(path, Prefix, &s)
	require.NoError(t, err)
	require.Equal(t, "a b c", s.WorkerID)
	require.Equal(t, path+":3", origins.Of("kafka.topic"))
	require.Equal(t, path+":4", origins.Of("window"))
}
