package temporalclient

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/testsuite/tlstest"
)

// env is a fixed environment for resolve.
type env map[string]string

func (e env) Environ() []string {
	var out []string
	for k, v := range e {
		out = append(out, k+"="+v)
	}
	return out
}

func (e env) LookupEnv(k string) (string, bool) { v, ok := e[k]; return v, ok }

func write(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
	return p
}

// noUserConfig points the default config file location at an empty
// folder, so the user's own Temporal config stays out of the test.
func noUserConfig(t *testing.T) {
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("HOME", t.TempDir())
}

func TestResolvePrecedence(t *testing.T) {
	noUserConfig(t)
	profiles := write(t, "temporal.toml", `
[profile.default]
address = "profile-default:7233"
namespace = "ns-default"

[profile.prod]
address = "prod.tmprl.cloud:7233"
namespace = "prod.acct"
api_key = "profile-key"
`)
	cases := []struct {
		name    string
		c       Config
		env     env
		want    Resolved
		sources map[string]string
	}{
		{"defaults", Config{}, env{},
			Resolved{Address: DefaultAddr, Namespace: DefaultNSName},
			map[string]string{"address": "default", "namespace": "default"}},
		{"the default profile of the file", Config{ConfigFile: profiles}, env{},
			Resolved{Address: "profile-default:7233", Namespace: "ns-default"},
			map[string]string{"address": "profile.default.address in " + profiles}},
		{"TEMPORAL_PROFILE picks a profile; its API key turns TLS on", Config{}, env{EnvConfigFile: profiles, EnvProfile: "prod"},
			Resolved{Address: "prod.tmprl.cloud:7233", Namespace: "prod.acct", TLS: true, APIKey: true},
			map[string]string{"api_key": "profile.prod.api_key in " + profiles, "tls": "profile.prod.api_key in " + profiles}},
		{"a TLS setting turns TLS on, and is its source", Config{TLSServerName: "frontend", KeyPath: "temporal"}, env{},
			Resolved{Address: DefaultAddr, Namespace: DefaultNSName, TLS: true},
			map[string]string{"tls": "temporal.tls_server_name"}},
		{"so does TEMPORAL_API_KEY", Config{}, env{EnvAPIKey: "k"},
			Resolved{Address: DefaultAddr, Namespace: DefaultNSName, TLS: true, APIKey: true},
			map[string]string{"tls": EnvAPIKey}},
		{"the environment wins over the profile", Config{Profile: "prod"}, env{EnvConfigFile: profiles, EnvAddress: "env:7233"},
			Resolved{Address: "env:7233", Namespace: "prod.acct", TLS: true, APIKey: true},
			map[string]string{"address": EnvAddress, "namespace": "profile.prod.namespace in " + profiles}},
		{"flags win over the environment", Config{Address: "flag:7233", Namespace: "flag-ns"}, env{EnvAddress: "env:7233", EnvNamespace: "env-ns", EnvConfigFile: profiles},
			Resolved{Address: "flag:7233", Namespace: "flag-ns"},
			map[string]string{"address": "--address", "namespace": "--namespace"}},
		{"--tls=false keeps an API key on plaintext", Config{TLSDisabled: true, ConfigFile: profiles, Profile: "prod"}, env{},
			Resolved{Address: "prod.tmprl.cloud:7233", Namespace: "prod.acct", APIKey: true},
			map[string]string{"tls": "--tls=false"}},
		{"TEMPORAL_TLS=true with nothing else", Config{}, env{EnvTLS: "true"},
			Resolved{Address: DefaultAddr, Namespace: DefaultNSName, TLS: true},
			map[string]string{"tls": EnvTLS}},
		{"YAML keys name the sources", Config{Address: "yaml:7233", KeyPath: "temporal"}, env{},
			Resolved{Address: "yaml:7233", Namespace: DefaultNSName},
			map[string]string{"address": "temporal.address"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r, err := tc.c.resolve(tc.env)
			require.NoError(t, err)
			assert.Equal(t, tc.want.Address, r.Address)
			assert.Equal(t, tc.want.Namespace, r.Namespace)
			assert.Equal(t, tc.want.TLS, r.TLS, "TLS")
			assert.Equal(t, tc.want.APIKey, r.APIKey, "API key")
			for k, v := range tc.sources {
				assert.Equal(t, v, r.Source(k), "source of %s", k)
			}
			assert.NotContains(t, r.String(), "profile-key", "the API key never shows")
			opts, err := r.Options(nil)
			require.NoError(t, err)
			assert.Equal(t, r.Address, opts.HostPort)
			assert.Equal(t, r.Namespace, opts.Namespace)
			assert.Equal(t, r.TLS, opts.ConnectionOptions.TLS != nil)
			assert.Equal(t, !r.TLS, opts.ConnectionOptions.TLSDisabled)
			assert.Equal(t, r.APIKey, opts.Credentials != nil)
		})
	}
}

func TestResolveTLSMaterial(t *testing.T) {
	pki := tlstest.New(t)
	keyFile := write(t, "key", "  sekret-key\n")
	c := Config{TLSCA: pki.CAFile, TLSServerName: "server", APIKeyFile: keyFile}
	noUserConfig(t)
	r, err := c.resolve(env{EnvTLSCert: pki.ClientCertFile, EnvTLSKey: pki.ClientKeyFile})
	require.NoError(t, err)
	opts, err := r.Options(nil)
	require.NoError(t, err)
	tc := opts.ConnectionOptions.TLS
	require.NotNil(t, tc)
	assert.Len(t, tc.Certificates, 1, "the client pair from TEMPORAL_TLS_CLIENT_*_PATH")
	assert.NotNil(t, tc.RootCAs, "the CA from --tls-ca-path")
	assert.Equal(t, "server", tc.ServerName)
	assert.False(t, tc.InsecureSkipVerify)
	assert.NotNil(t, opts.Credentials, "the API key from --api-key-file")
	assert.Equal(t, "--api-key-file", r.Source("api_key"))
	assert.Equal(t, EnvTLSCert, r.Source("tls_cert_path"))
	assert.NotContains(t, r.String(), "sekret")

	// The Temporal CLI's TEMPORAL_TLS_DISABLE_HOST_VERIFICATION is honoured.
	r, err = Config{TLSCA: pki.CAFile}.resolve(env{"TEMPORAL_TLS_DISABLE_HOST_VERIFICATION": "true"})
	require.NoError(t, err)
	opts, err = r.Options(nil)
	require.NoError(t, err)
	assert.True(t, opts.ConnectionOptions.TLS.InsecureSkipVerify)
}

// TestEnvironmentPathWinsOverProfileData: a TEMPORAL_TLS_*_PATH variable
// wins over the profile's *_data of the same setting, as the environment
// wins over the profile; the profile's PEM data was used instead (while
// Source named the variable).
func TestEnvironmentPathWinsOverProfileData(t *testing.T) {
	noUserConfig(t)
	fromProfile, fromEnv := tlstest.New(t), tlstest.New(t)
	profile := write(t, "temporal.toml", "[profile.default.tls]\n"+
		"server_ca_cert_data = \"\"\"\n"+string(fromProfile.CAPEM)+"\"\"\"\n"+
		"client_cert_data = \"\"\"\n"+string(fromProfile.ClientCertPEM)+"\"\"\"\n"+
		"client_key_data = \"\"\"\n"+string(fromProfile.ClientKeyPEM)+"\"\"\"\n")
	r, err := Config{ConfigFile: profile}.resolve(env{
		EnvTLSCA: fromEnv.CAFile, EnvTLSCert: fromEnv.ClientCertFile, EnvTLSKey: fromEnv.ClientKeyFile,
	})
	require.NoError(t, err)
	opts, err := r.Options(nil)
	require.NoError(t, err)
	tc := opts.ConnectionOptions.TLS
	require.NotNil(t, tc)
	assert.True(t, tc.RootCAs.Equal(fromEnv.Pool), "the CA of TEMPORAL_TLS_SERVER_CA_CERT_PATH")
	want, err := tls.X509KeyPair(fromEnv.ClientCertPEM, fromEnv.ClientKeyPEM)
	require.NoError(t, err)
	require.Len(t, tc.Certificates, 1)
	assert.Equal(t, want.Certificate, tc.Certificates[0].Certificate, "the client pair of TEMPORAL_TLS_CLIENT_*_PATH")
	assert.Equal(t, EnvTLSCA, r.Source("tls_ca_path"))

	// And the other way round: the variable's data wins over the
	// profile's path.
	profile = write(t, "paths.toml", "[profile.default.tls]\nserver_ca_cert_path = \""+fromProfile.CAFile+"\"\n")
	r, err = Config{ConfigFile: profile}.resolve(env{"TEMPORAL_TLS_SERVER_CA_CERT_DATA": string(fromEnv.CAPEM)})
	require.NoError(t, err)
	opts, err = r.Options(nil)
	require.NoError(t, err)
	assert.True(t, opts.ConnectionOptions.TLS.RootCAs.Equal(fromEnv.Pool), "the CA of TEMPORAL_TLS_SERVER_CA_CERT_DATA")
}

func TestResolveErrorsNameWhatTheUserTyped(t *testing.T) {
	noUserConfig(t)
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.pem")
	notPEM := write(t, "ca.pem", "not pem")
	empty := write(t, "empty.toml", "")
	profile := write(t, "temporal.toml", "[profile.prod.tls]\nclient_cert_path = \""+missing+"\"\nclient_key_path = \""+missing+"\"\n[profile.dev]\n")
	both := write(t, "both.toml", "[profile.default.tls]\nserver_ca_cert_path = \""+missing+"\"\nserver_ca_cert_data = \"not pem\"\n")
	cases := []struct {
		name string
		c    Config
		env  env
		want string
	}{
		{"address without port (flag)", Config{Address: "localhost"}, nil, `--address "localhost": want host:port`},
		{"address without port (variable)", Config{}, env{EnvAddress: "localhost"}, `TEMPORAL_ADDRESS "localhost": want host:port`},
		{"address without port (YAML)", Config{Address: "localhost", KeyPath: "temporal"}, nil, `temporal.address "localhost": want host:port`},
		{"address with a port that is no number", Config{Address: "127.0.0.1:notaport"}, nil, `--address "127.0.0.1:notaport": want host:port, and "notaport" is no port`},
		{"address with a port out of range", Config{}, env{EnvAddress: "127.0.0.1:70000"}, `TEMPORAL_ADDRESS "127.0.0.1:70000": want host:port, and "70000" is no port`},
		{"certificate without key (flag)", Config{TLSCert: notPEM}, nil,
			"needs both --tls-cert-path and --tls-key-path; --tls-key-path is missing"},
		{"certificate without key (variable)", Config{}, env{EnvTLSCert: notPEM},
			"needs both TEMPORAL_TLS_CLIENT_CERT_PATH and --tls-key-path; --tls-key-path is missing"},
		{"certificate without key (YAML)", Config{TLSKey: notPEM, KeyPath: "temporal"}, nil,
			"needs both temporal.tls_cert_path and temporal.tls_key_path; temporal.tls_cert_path is missing"},
		{"missing CA file", Config{TLSCA: missing}, nil, `--tls-ca-path "` + missing + `": no such file`},
		{"CA that is not PEM, from the variable", Config{}, env{EnvTLSCA: notPEM}, `TEMPORAL_TLS_SERVER_CA_CERT_PATH "` + notPEM + `" holds no PEM certificate`},
		{"missing certificate from a profile", Config{Profile: "prod", ConfigFile: profile}, nil,
			`profile.prod.tls.client_cert_path in ` + profile + ` "` + missing + `": no such file`},
		{"unknown profile lists the known ones", Config{Profile: "staging", ConfigFile: profile}, nil,
			`--profile "staging": ` + profile + ` has no such profile (it has: dev, prod)`},
		{"unknown profile from the variable", Config{ConfigFile: profile}, env{EnvProfile: "staging"}, `TEMPORAL_PROFILE "staging"`},
		{"a named config file must exist", Config{ConfigFile: missing}, nil, `--config-file "` + missing + `": no such file`},
		{"so must one named by the variable", Config{}, env{EnvConfigFile: missing}, `TEMPORAL_CONFIG_FILE "` + missing + `": no such file`},
		{"a profile needs a file", Config{Profile: "prod"}, nil, `--profile "prod": there is no Temporal config file`},
		{"bad TOML", Config{ConfigFile: notPEM}, nil, "the Temporal config file " + notPEM},
		{"bad TEMPORAL_TLS", Config{}, env{EnvTLS: "yes"}, `TEMPORAL_TLS "yes": want true, false, 1 or 0`},
		{"missing API key file", Config{APIKeyFile: missing}, nil, `--api-key-file "` + missing + `": no such file`},
		{"empty API key file", Config{APIKeyFile: empty}, nil, `--api-key-file "` + empty + `" is empty`},
		{"a CA path and data in the profile", Config{ConfigFile: both}, nil,
			`profile.default.tls in ` + both + ` sets both server_ca_cert_path and server_ca_cert_data: give one`},
		{"a key path and data in the environment", Config{}, env{EnvTLSKey: notPEM, "TEMPORAL_TLS_CLIENT_KEY_DATA": "not pem"},
			`both TEMPORAL_TLS_CLIENT_KEY_PATH and TEMPORAL_TLS_CLIENT_KEY_DATA are set: give one`},
		{"--tls=false and a TLS setting", Config{TLSDisabled: true, TLSCA: notPEM}, nil, "--tls=false and --tls-ca-path contradict each other: TLS off ignores it"},
		{"tls_disabled and a TLS setting (YAML)", Config{TLSDisabled: true, TLSServerName: "frontend", KeyPath: "temporal"}, nil,
			"temporal.tls_disabled and temporal.tls_server_name contradict each other"},
		{"--tls and --tls=false", Config{TLS: true, TLSDisabled: true, KeyPath: "temporal"}, nil, "temporal.tls and temporal.tls_disabled contradict each other"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := tc.env
			if e == nil {
				e = env{}
			}
			_, err := tc.c.resolve(e)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
			assert.False(t, strings.Contains(err.Error(), "tls_cert ") || strings.Contains(err.Error(), "tls_ca "),
				"no names the user never typed: %v", err)
		})
	}
}
