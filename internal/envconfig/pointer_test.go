package envconfig

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"
)

// TestPointerLeaves: a *bool key (unset means its default, e.g. the MQTT
// source's ack_on_checkpoint) is set by its variable, to false as well
// as true, stays nil without one, and is listed by Keys. Bug: pointer
// leaves were skipped ("set in the file only"), so
// TFLO_SOURCE_MQTT_ACK_ON_CHECKPOINT=false did nothing and --help left the
// key out.
func TestPointerLeaves(t *testing.T) {
	type cfg struct {
		On  *bool `yaml:"on"`
		Off *bool `yaml:"off"`
		Nil *bool `yaml:"nil"`
	}
	env := map[string]string{"X_ON": "true", "X_OFF": "false"}
	var c cfg
	require.NoError(t, Apply("X", &c, func(k string) (string, bool) { v, ok := env[k]; return v, ok }))
	require.NotNil(t, c.On)
	require.True(t, *c.On)
	require.NotNil(t, c.Off, "a variable set to false is not unset")
	require.False(t, *c.Off)
	require.Nil(t, c.Nil)

	keys, err := Keys("X", cfg{})
	require.NoError(t, err)
	require.Len(t, keys, 3)
	require.Equal(t, Key{Env: "X_OFF", Path: "off", Type: "bool", Field: "github.com/tflo-io/tflo/internal/envconfig.cfg.Off"}, keys[1])
}

// selfDecoded is a section that reads itself from YAML with no key of its
// own (a spec's decoder): set in the file only.
type selfDecoded struct{ name string }

func (s *selfDecoded) UnmarshalYAML(n *yaml.Node) error { s.name = n.Value; return nil }

// TestAllKeysInFieldOrder: AllKeys are the keys of Keys and the
// file-only ones, each file-only key in its field's place (--help listed
// them after all the others).
func TestAllKeysInFieldOrder(t *testing.T) {
	type cfg struct {
		Name    string      `yaml:"name"`
		Decoder selfDecoded `yaml:"decoder"`
		Unit    *bool       `yaml:"unit"`
		Graph   struct {
			Nodes   []struct{ A int } `yaml:"nodes"`
			Outputs []string          `yaml:"outputs"`
		} `yaml:"graph"`
		Sinks []struct{ B int } `yaml:"sinks"`
		TLS   *tls              `yaml:"tls"`
	}
	all, err := AllKeys("X", cfg{})
	require.NoError(t, err)
	var paths, fileOnly []string
	for _, k := range all {
		paths = append(paths, k.Path)
		if k.Env == "" {
			fileOnly = append(fileOnly, k.Path)
		}
	}
	require.Equal(t, []string{"name", "decoder", "unit", "graph.nodes", "graph.outputs", "sinks", "tls.ca_file"}, paths)
	require.Equal(t, []string{"decoder", "graph.nodes", "sinks"}, fileOnly)
	for _, zero := range []any{cfg{}, sample{}} {
		keys, err := Keys("X", zero)
		require.NoError(t, err)
		all, err := AllKeys("X", zero)
		require.NoError(t, err)
		all = slices.DeleteFunc(all, func(k Key) bool { return k.Env == "" })
		require.Equal(t, keys, all, "%T: the keys variables set are Keys'", zero)
	}
}

// TestZeroValueSetsAnAbsentSection: a variable setting a key of a
// section the file does not have allocates the section, whatever its
// value. Bug: a zero value (TFLO_X_Y=0 or =false) left the section nil,
// so the setting was dropped (and --print-config, naming the variable as
// the key's origin, printed no such key) while any other value was kept.
// A variable set to "" still clears its key and allocates nothing.
func TestZeroValueSetsAnAbsentSection(t *testing.T) {
	type section struct {
		N  int  `yaml:"n"`
		On bool `yaml:"on"`
	}
	type cfg struct {
		A *section `yaml:"a"`
		B *section `yaml:"b"`
		C *section `yaml:"c"`
	}
	env := map[string]string{"X_A_N": "0", "X_B_ON": "false", "X_C_N": ""}
	var c cfg
	origins := Origins{}
	require.NoError(t, apply("X", &c, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, origins))
	require.NotNil(t, c.A, "X_A_N=0 is a setting of section a")
	require.NotNil(t, c.B, "X_B_ON=false is a setting of section b")
	require.Nil(t, c.C, `X_C_N="" clears its key: no section`)

	var out strings.Builder
	require.NoError(t, Print(&out, &c, origins))
	require.Contains(t, out.String(), "a.n = 0")
	require.Contains(t, out.String(), "# env X_A_N")
	require.Contains(t, out.String(), "b.on = false")
	require.Contains(t, out.String(), "# env X_B_ON")
}
