package temporalclient_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/temporalclient"
)

func TestConfigFromEnvAndDefaults(t *testing.T) {
	t.Setenv(temporalclient.EnvAddress, "temporal.example:7233")
	t.Setenv(temporalclient.EnvAPIKey, "sekret-key")
	c := temporalclient.Config{Namespace: "prod"}.FromEnv().WithDefaults()
	assert.Equal(t, "temporal.example:7233", c.Address)
	assert.Equal(t, "prod", c.Namespace, "explicit settings win over the environment")
	assert.NotContains(t, c.String(), "sekret", "the API key never shows")
	assert.Contains(t, c.String(), "tls")

	d := temporalclient.Config{}.WithDefaults()
	assert.Equal(t, "127.0.0.1:7233", d.Address)
	assert.Equal(t, "default", d.Namespace)
	tc, err := d.TLSConfig()
	require.NoError(t, err)
	assert.Nil(t, tc, "plaintext by default")
}

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(bad, []byte("not pem"), 0o600))
	cases := []struct {
		name string
		c    temporalclient.Config
		want string
	}{
		{"address without port", temporalclient.Config{Address: "localhost"}, `temporal address "localhost": want host:port`},
		{"cert without key", temporalclient.Config{TLSCert: bad}, "needs both tls_cert and tls_key"},
		{"missing CA file", temporalclient.Config{TLSCA: filepath.Join(dir, "nope.pem")}, `tls_ca file`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := temporalclient.Config{TLSCA: bad}.TLSConfig()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "holds no PEM certificate")
}
