package envconfig

import (
	"testing"

	"github.com/stretchr/testify/require"
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
