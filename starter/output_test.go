package main

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
)

type inner struct {
	Took time.Duration `json:"took"`
}

type shown struct {
	inner
	Name     string            `json:"name"`
	At       time.Time         `json:"at"`
	Never    time.Time         `json:"never"`
	Maybe    *time.Time        `json:"maybe,omitempty"`
	List     []string          `json:"list"`
	Gone     []string          `json:"gone,omitempty"`
	Labels   map[string]string `json:"labels"`
	Hidden   string            `json:"-"`
	Untagged int
	Waits    []time.Duration `json:"waits"`
	Raw      []byte          `json:"raw"`
}

func TestEmitFormats(t *testing.T) {
	at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.FixedZone("CEST", 2*3600))
	v := []shown{{
		inner: inner{Took: 1200 * time.Millisecond}, Name: "a", At: at, Labels: map[string]string{"z": "1", "a": "2"},
		Hidden: "x", Untagged: 7, Waits: []time.Duration{time.Second}, Raw: []byte("hi"),
	}}
	cases := []struct {
		format outputFormat
		want   string
	}{
		{formatJSON, `[
  {
    "took": "1.2s",
    "name": "a",
    "at": "2026-06-01T10:00:00Z",
    "list": [],
    "labels": {
      "a": "2",
      "z": "1"
    },
    "Untagged": 7,
    "waits": [
      "1s"
    ],
    "raw": "aGk="
  }
]
`},
		{formatYAML, `- took: 1.2s
  name: a
  at: "2026-06-01T10:00:00Z"
  list: []
  labels:
    a: "2"
    z: "1"
  Untagged: 7
  waits:
    - 1s
  raw: aGk=
`},
	}
	for _, tc := range cases {
		t.Run(string(tc.format), func(t *testing.T) {
			var out bytes.Buffer
			a := &app{out: &out, format: tc.format}
			require.NoError(t, a.emit(v, func(io.Writer) { t.Error("text output under -o " + string(tc.format)) }))
			assert.Equal(t, tc.want, out.String())
		})
	}
}

func TestEmitEmptyListing(t *testing.T) {
	var nilSlice []shown
	for _, tc := range []struct {
		format      outputFormat
		out, errOut string
	}{
		{formatJSON, "[]\n", ""},
		{formatYAML, "[]\n", ""},
		{formatTable, "NAME  AT\n", "nothing here\n"},
	} {
		t.Run(string(tc.format), func(t *testing.T) {
			var out, errOut bytes.Buffer
			a := &app{out: &out, errOut: &errOut, format: tc.format}
			tb := newTable("NAME", "AT")
			tb.empty = "nothing here"
			require.NoError(t, a.emitTable(nilSlice, tb))
			assert.Equal(t, tc.out, out.String())
			assert.Equal(t, tc.errOut, errOut.String())
		})
	}
}

func TestCell(t *testing.T) {
	at := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		in   any
		want string
	}{
		{nil, "-"},
		{"", "-"},
		{"x", "x"},
		{time.Time{}, "-"},
		{at, at.Local().Format(time.RFC3339)},
		{age(time.Time{}), "-"},
		{age(time.Now().Add(-90 * time.Second)), "1m30s ago"},
		{850 * time.Microsecond, "850µs"},
		{1634567 * time.Nanosecond, "2ms"},
		{1234 * time.Millisecond, "1.2s"},
		{3*time.Minute + 4400*time.Millisecond, "3m4s"},
		{42, "42"},
		{enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, "Running"},
	}
	for _, tc := range cases {
		assert.Equal(t, tc.want, cell(tc.in), "%#v", tc.in)
	}
}

func TestExecutionStatusOneCasing(t *testing.T) {
	for s, want := range map[enumspb.WorkflowExecutionStatus]string{
		enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:          "running",
		enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:        "timed_out",
		enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW: "continued_as_new",
		enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:         "canceled",
	} {
		assert.Equal(t, want, executionStatus(s))
	}
}

// TestEveryCommandDeclaresItsArguments walks the whole command tree —
// including commands added after this test was written, and cobra's
// completion group, which cobra used to add only at execution, after
// finishTree ("starter completion bogus" printed its help and exited 0)
// — and runs each with an argument it does not take: a leaf must refuse
// it, a group must call it an unknown command, both as a usage error
// (exit 2), before anything runs.
func TestEveryCommandDeclaresItsArguments(t *testing.T) {
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		if c.Hidden || c.Name() == "help" {
			return
		}
		path := strings.Fields(c.CommandPath())[1:]
		n++
		t.Run(strings.Join(append([]string{"starter"}, path...), " "), func(t *testing.T) {
			r := run(t, append(path, "--address", "127.0.0.1:1", "no-such-argument", "another")...)
			require.Equal(t, exitUsage, r.code, "stdout: %s\nstderr: %s", r.out, r.err)
			if c.HasSubCommands() {
				assert.Contains(t, r.err, `unknown command "no-such-argument"`)
			}
			assert.True(t, strings.HasPrefix(r.err, "Error: "), r.err)
			assert.Contains(t, r.err, "Run '"+c.CommandPath()+" --help' for usage.")
		})
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root := newRootCommand(&bytes.Buffer{}, &bytes.Buffer{})
	walk(root)
	assert.GreaterOrEqual(t, n, 20, "every command was visited")
	c, _, err := root.Find([]string{"completion", "bash"})
	require.NoError(t, err)
	assert.Equal(t, "starter completion bash", c.CommandPath(), "the completion group is in the tree finishTree walks")
	r := run(t, "completion", "bogus")
	assert.Equal(t, exitUsage, r.code, "stdout: %s\nstderr: %s", r.out, r.err)
	assert.Contains(t, r.err, `Error: unknown command "bogus" for "starter completion"`)
}

// TestYAMLFloatsPrintPlainly: -o yaml printed whole floats in exponent
// form ("max: 1.6777216e+07" in starter operators -o yaml); they print as
// -o json prints them.
func TestYAMLFloatsPrintPlainly(t *testing.T) {
	r := run(t, "operators", "sma", "-o", "yaml")
	require.Equal(t, exitOK, r.code, r.err)
	assert.Contains(t, r.out, "max: 16777216\n")
	assert.NotContains(t, r.out, "e+")

	v := map[string]any{"big": 1e6, "half": 2.5, "tiny": 1e-7, "huge": 1e21, "neg": -3e6, "zero": 0.0, "f32": float32(1e6)}
	var out bytes.Buffer
	a := &app{out: &out, format: formatYAML}
	require.NoError(t, a.emit(v, nil))
	assert.Equal(t, "big: 1000000\nf32: 1000000\nhalf: 2.5\nhuge: 1e+21\nneg: -3000000\ntiny: 1e-07\nzero: 0\n", out.String())
}
