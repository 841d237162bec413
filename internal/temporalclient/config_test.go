package temporalclient_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/envconfig"
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

// TestOfficialAndCLIVariableNames: the official TEMPORAL_TLS_*_PATH names
// win over the Temporal CLI's older ones, which still work.
func TestOfficialAndCLIVariableNames(t *testing.T) {
	t.Setenv("TEMPORAL_TLS_CA", "/old/ca.pem")
	t.Setenv("TEMPORAL_TLS_CERT", "/old/cert.pem")
	t.Setenv(temporalclient.EnvTLSClientCert, "/new/cert.pem")
	c := temporalclient.Config{}.FromEnv()
	require.NotNil(t, c.TLS)
	assert.Equal(t, "/old/ca.pem", c.TLS.ServerCACertPath)
	assert.Equal(t, "/new/cert.pem", c.TLS.ClientCertPath)

	t.Setenv(temporalclient.EnvTLS, "false")
	t.Setenv(temporalclient.EnvAPIKey, "k")
	off := temporalclient.Config{}.FromEnv()
	tc, err := off.TLSConfig()
	require.NoError(t, err)
	assert.Nil(t, tc, "TEMPORAL_TLS=false turns TLS off even with an API key")
}

// TestYAMLKeysAreTheOfficialOnes: a worker config's temporal section
// reads the official keys, strictly.
func TestYAMLKeysAreTheOfficialOnes(t *testing.T) {
	var c struct {
		Temporal temporalclient.Config `yaml:"temporal"`
	}
	require.NoError(t, envconfig.Decode([]byte("temporal:\n  address: t:7233\n  namespace: ns\n  tls:\n    server_ca_cert_path: /ca.pem\n    server_name: t.example\n"), &c))
	assert.Equal(t, "t:7233", c.Temporal.Address)
	assert.Equal(t, &temporalclient.TLS{ServerCACertPath: "/ca.pem", ServerName: "t.example"}, c.Temporal.TLS)
	err := envconfig.Decode([]byte("temporal:\n  tls_ca: /ca.pem\n"), &c)
	require.ErrorContains(t, err, "temporal.tls_ca: unknown key")
	err = envconfig.Decode([]byte("temporal:\n  api_key: secret\n"), &c)
	require.ErrorContains(t, err, "temporal.api_key: unknown key", "secrets are not read from files")
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
		{"cert without key", temporalclient.Config{TLS: &temporalclient.TLS{ClientCertPath: bad}}, "needs both tls.client_cert_path and tls.client_key_path"},
		{"missing CA file", temporalclient.Config{TLS: &temporalclient.TLS{ServerCACertPath: filepath.Join(dir, "nope.pem")}}, `tls.server_ca_cert_path file`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.Validate()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := temporalclient.Config{TLS: &temporalclient.TLS{ServerCACertPath: bad}}.TLSConfig()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "holds no PEM certificate")
}
