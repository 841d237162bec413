package temporalclient

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"sort"
	"strings"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/contrib/envconfig"
	"go.temporal.io/sdk/log"

	"github.com/tflo-io/tflo/internal/tlsconfig"
)

// Config is how to reach Temporal, as the caller's flags or YAML keys say.
// A setting left empty comes from the Temporal CLI's environment variable,
// else from the selected profile of the Temporal CLI's config file
// (TOML), else from the default; see Resolve. So a tflo binary reaches
// the Temporal that `temporal` reaches with the same environment and
// profile.
//
// The keys mirror the Temporal CLI's flags (--tls-cert-path is
// tls_cert_path). Secrets are never keys: the API key comes from
// APIKeyFile, TEMPORAL_API_KEY or the profile.
type Config struct {
	// Address is host:port of the frontend (empty: TEMPORAL_ADDRESS or
	// the profile's, else starter dials 127.0.0.1:7233 and a worker runs
	// without Temporal, coordinating checkpoints in process).
	Address string `json:"address,omitempty" yaml:"address,omitempty"`
	// Namespace (default "default").
	Namespace string `json:"namespace,omitempty" yaml:"namespace,omitempty"`
	// TLS turns TLS on with the system CAs, even without other TLS
	// settings. TLS is on by itself when an API key or any TLS setting is
	// present.
	TLS bool `json:"tls,omitempty" yaml:"tls,omitempty"`
	// TLSDisabled turns TLS off even when an API key or TLS settings from
	// the environment or the profile would turn it on (the Temporal CLI's
	// --tls=false).
	TLSDisabled bool `json:"tls_disabled,omitempty" yaml:"tls_disabled,omitempty"`
	// TLSCA is a PEM file of the CAs that sign the server's certificate
	// (default: the system roots).
	TLSCA string `json:"tls_ca_path,omitempty" yaml:"tls_ca_path,omitempty"`
	// TLSCert and TLSKey are the PEM client certificate and its key, for
	// mutual TLS. Both or neither.
	TLSCert string `json:"tls_cert_path,omitempty" yaml:"tls_cert_path,omitempty"`
	TLSKey  string `json:"tls_key_path,omitempty" yaml:"tls_key_path,omitempty"`
	// TLSServerName overrides the name checked in the server certificate.
	TLSServerName string `json:"tls_server_name,omitempty" yaml:"tls_server_name,omitempty"`
	// APIKeyFile is a file holding the API key (Temporal Cloud; it turns
	// TLS on). A file, not a flag value, keeps the key out of the process
	// list.
	APIKeyFile string `json:"api_key_file,omitempty" yaml:"api_key_file,omitempty"`
	// APIKey is the API key itself, for callers that hold it already; it
	// is never read from or written to a file.
	APIKey string `json:"-" yaml:"-"`
	// Profile selects the profile of the config file (default: the
	// TEMPORAL_PROFILE variable, else "default").
	Profile string `json:"profile,omitempty" yaml:"profile,omitempty"`
	// ConfigFile is the Temporal CLI config file (default: the
	// TEMPORAL_CONFIG_FILE variable, else
	// <user config dir>/temporalio/temporal.toml when it exists). A file
	// named here or in TEMPORAL_CONFIG_FILE must exist.
	ConfigFile string `json:"config_file,omitempty" yaml:"config_file,omitempty"`

	// KeyPath says how messages name the settings of this struct: empty
	// names them as the starter flags (--tls-cert-path); "temporal" as
	// YAML keys under temporal (temporal.tls_cert_path).
	KeyPath string `json:"-" yaml:"-"`
}

// Environment variables, with the Temporal CLI's names (read through
// go.temporal.io/sdk/contrib/envconfig, which also reads the *_DATA
// variants of the PEM paths, TEMPORAL_TLS_DISABLE_HOST_VERIFICATION,
// TEMPORAL_CLIENT_AUTHORITY and TEMPORAL_GRPC_META_*).
const (
	EnvAddress    = "TEMPORAL_ADDRESS"
	EnvNamespace  = "TEMPORAL_NAMESPACE"
	EnvTLS        = "TEMPORAL_TLS"
	EnvTLSCA      = "TEMPORAL_TLS_SERVER_CA_CERT_PATH"
	EnvTLSCert    = "TEMPORAL_TLS_CLIENT_CERT_PATH"
	EnvTLSKey     = "TEMPORAL_TLS_CLIENT_KEY_PATH"
	EnvTLSServer  = "TEMPORAL_TLS_SERVER_NAME"
	EnvAPIKey     = "TEMPORAL_API_KEY"
	EnvProfile    = "TEMPORAL_PROFILE"
	EnvConfigFile = "TEMPORAL_CONFIG_FILE"

	DefaultAddr   = "127.0.0.1:7233"
	DefaultNSName = "default"
)

// A setting's sources, in order of precedence: the Config field, the
// environment variables and the profile keys that set it.
type setting struct {
	key     string   // Config's JSON key
	env     []string // TEMPORAL_* variables
	profile []string // keys in the profile
}

var (
	sAddress    = setting{"address", []string{EnvAddress}, []string{"address"}}
	sNamespace  = setting{"namespace", []string{EnvNamespace}, []string{"namespace"}}
	sTLS        = setting{"tls", []string{EnvTLS}, []string{"tls.disabled"}}
	sTLSCA      = setting{"tls_ca_path", []string{EnvTLSCA, "TEMPORAL_TLS_SERVER_CA_CERT_DATA"}, []string{"tls.server_ca_cert_path", "tls.server_ca_cert_data"}}
	sTLSCert    = setting{"tls_cert_path", []string{EnvTLSCert, "TEMPORAL_TLS_CLIENT_CERT_DATA"}, []string{"tls.client_cert_path", "tls.client_cert_data"}}
	sTLSKey     = setting{"tls_key_path", []string{EnvTLSKey, "TEMPORAL_TLS_CLIENT_KEY_DATA"}, []string{"tls.client_key_path", "tls.client_key_data"}}
	sTLSServer  = setting{"tls_server_name", []string{EnvTLSServer}, []string{"tls.server_name"}}
	sAPIKey     = setting{"api_key", []string{EnvAPIKey}, []string{"api_key"}}
	allSettings = []setting{sAddress, sNamespace, sTLS, sTLSCA, sTLSCert, sTLSKey, sTLSServer, sAPIKey}
)

// name is how a message names Config's setting key.
func (c Config) name(key string) string {
	if c.KeyPath != "" {
		return c.KeyPath + "." + key
	}
	switch key {
	case "tls_disabled":
		return "--tls=false"
	case "api_key":
		return "the API key"
	}
	return "--" + strings.ReplaceAll(key, "_", "-")
}

// Resolved is a Config with the environment, the profile and the defaults
// applied and the TLS material read: what a client dials.
type Resolved struct {
	// Address and Namespace are the effective ones.
	Address, Namespace string
	// TLS reports whether the connection uses TLS.
	TLS bool
	// APIKey reports whether an API key is sent (the key never shows).
	APIKey bool

	profile envconfig.ClientConfigProfile
	tls     *tls.Config
	sources map[string]string
}

// Source says where the effective value of a setting came from, named as
// the user typed it: a flag or YAML key, a TEMPORAL_* variable,
// "profile.<name>.<key> in <file>", or "default". key is Config's JSON key
// ("tls_cert_path"); "" when the setting is unset.
func (r Resolved) Source(key string) string { return r.sources[key] }

// String describes the target without secrets.
func (r Resolved) String() string {
	s := r.Address + " namespace=" + r.Namespace
	if r.TLS {
		s += " tls"
	}
	if r.APIKey {
		s += " api-key=<redacted>"
	}
	return s
}

// Validate reports what is wrong with c itself, without reading the
// environment or any file; Resolve checks the rest.
func (c Config) Validate() error {
	var errs []error
	if c.Address != "" {
		if err := checkAddress(c.name("address"), c.Address); err != nil {
			errs = append(errs, err)
		}
	}
	if c.TLS && c.TLSDisabled {
		errs = append(errs, fmt.Errorf("%s and %s contradict each other", c.name("tls"), c.name("tls_disabled")))
	}
	if c.TLSDisabled {
		// TLS off would ignore them: a TLS setting of c's own is not one
		// the environment or the profile happens to hold.
		for _, s := range []struct{ key, v string }{
			{"tls_ca_path", c.TLSCA}, {"tls_cert_path", c.TLSCert}, {"tls_key_path", c.TLSKey}, {"tls_server_name", c.TLSServerName},
		} {
			if s.v != "" {
				errs = append(errs, fmt.Errorf("%s and %s contradict each other: TLS off ignores it", c.name("tls_disabled"), c.name(s.key)))
			}
		}
	}
	if c.APIKey != "" && c.APIKeyFile != "" {
		errs = append(errs, fmt.Errorf("both %s and %s are set: give one", c.name("api_key"), c.name("api_key_file")))
	}
	return errors.Join(errs...)
}

func checkAddress(name, addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return fmt.Errorf("%s %q: want host:port", name, addr)
	}
	if _, err := net.LookupPort("tcp", port); err != nil {
		return fmt.Errorf("%s %q: want host:port, and %q is no port", name, addr, port)
	}
	return nil
}

// Resolve applies, for every setting, the first that is set of: the
// Config field, the Temporal CLI's environment variable, the profile of
// the config file, the default. It reads the API key file and the TLS
// material, and its errors name the flag, key, variable or profile key
// the bad value came from.
func (c Config) Resolve() (Resolved, error) { return c.resolve(envconfig.EnvLookupOS) }

func (c Config) resolve(env envconfig.EnvLookup) (Resolved, error) {
	r := Resolved{sources: map[string]string{}}
	if err := c.Validate(); err != nil {
		return r, err
	}
	prof, err := c.loadProfile(env, r.sources)
	if err != nil {
		return r, err
	}

	// The TEMPORAL_* variables, with envconfig's rules: a variable that is
	// set wins over the profile, even when empty.
	for _, v := range []string{EnvTLS, "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION"} {
		if s, ok := env.LookupEnv(v); ok && !isBool(s) {
			return r, fmt.Errorf("%s %q: want true, false, 1 or 0", v, s)
		}
	}
	if err := prof.ApplyEnvVars(env); err != nil {
		return r, fmt.Errorf("temporal environment: %w", err)
	}
	if t := prof.TLS; t != nil {
		// A PEM path and its _DATA variant are one setting: the variable
		// that sets one clears the other the profile gave, else the
		// profile's data (which tlsconfig prefers to a file) would win
		// over the variable's path.
		for _, p := range []struct {
			pathVar, dataVar string
			path             *string
			data             *[]byte
		}{
			{EnvTLSCA, "TEMPORAL_TLS_SERVER_CA_CERT_DATA", &t.ServerCACertPath, &t.ServerCACertData},
			{EnvTLSCert, "TEMPORAL_TLS_CLIENT_CERT_DATA", &t.ClientCertPath, &t.ClientCertData},
			{EnvTLSKey, "TEMPORAL_TLS_CLIENT_KEY_DATA", &t.ClientKeyPath, &t.ClientKeyData},
		} {
			path, pathSet := env.LookupEnv(p.pathVar)
			data, dataSet := env.LookupEnv(p.dataVar)
			switch {
			case path != "" && data != "":
				// The Temporal CLI refuses both; tlsconfig would take
				// the data and ignore the path.
				return r, fmt.Errorf("both %s and %s are set: give one", p.pathVar, p.dataVar)
			case pathSet && !dataSet:
				*p.data = nil
			case dataSet && !pathSet:
				*p.path = ""
			}
		}
	}
	for _, s := range allSettings {
		for _, v := range s.env {
			if _, ok := env.LookupEnv(v); ok {
				r.sources[s.key] = v
			}
		}
	}

	// The settings of c.
	tlsOf := func() *envconfig.ClientConfigTLS {
		if prof.TLS == nil {
			prof.TLS = &envconfig.ClientConfigTLS{}
		}
		return prof.TLS
	}
	set := func(key, v string, dst func(string)) {
		if v != "" {
			dst(v)
			r.sources[key] = c.name(key)
		}
	}
	set("address", c.Address, func(v string) { prof.Address = v })
	set("namespace", c.Namespace, func(v string) { prof.Namespace = v })
	set("tls_ca_path", c.TLSCA, func(v string) { t := tlsOf(); t.ServerCACertPath, t.ServerCACertData = v, nil })
	set("tls_cert_path", c.TLSCert, func(v string) { t := tlsOf(); t.ClientCertPath, t.ClientCertData = v, nil })
	set("tls_key_path", c.TLSKey, func(v string) { t := tlsOf(); t.ClientKeyPath, t.ClientKeyData = v, nil })
	set("tls_server_name", c.TLSServerName, func(v string) { tlsOf().ServerName = v })
	if c.TLS {
		tlsOf().Disabled = false
		r.sources["tls"] = c.name("tls")
	}
	if c.TLSDisabled {
		tlsOf().Disabled = true
		r.sources["tls"] = c.name("tls_disabled")
	}
	if c.APIKey != "" {
		prof.APIKey = c.APIKey
		r.sources["api_key"] = c.name("api_key")
	}
	if c.APIKeyFile != "" {
		key, err := readKeyFile(c.name("api_key_file"), c.APIKeyFile)
		if err != nil {
			return r, err
		}
		prof.APIKey = key
		r.sources["api_key"] = c.name("api_key_file")
	}

	// Defaults.
	if prof.Address == "" {
		prof.Address = DefaultAddr
		r.sources["address"] = "default"
	}
	if prof.Namespace == "" {
		prof.Namespace = DefaultNSName
		r.sources["namespace"] = "default"
	}
	if err := checkAddress(r.sources["address"], prof.Address); err != nil {
		return r, err
	}

	r.Address, r.Namespace, r.APIKey = prof.Address, prof.Namespace, prof.APIKey != ""
	r.TLS = prof.TLS != nil && !prof.TLS.Disabled || prof.TLS == nil && prof.APIKey != ""
	if r.TLS && r.sources["tls"] == "" {
		// TLS is on by itself: its source is the setting that turned it
		// on (else --print-config says "tls = true  # default").
		for _, k := range []string{"tls_ca_path", "tls_cert_path", "tls_key_path", "tls_server_name", "api_key"} {
			if s := r.sources[k]; s != "" {
				r.sources["tls"] = s
				break
			}
		}
		if _, ok := env.LookupEnv("TEMPORAL_TLS_DISABLE_HOST_VERIFICATION"); ok && r.sources["tls"] == "" {
			r.sources["tls"] = "TEMPORAL_TLS_DISABLE_HOST_VERIFICATION"
		}
	}
	if r.TLS {
		t := prof.TLS
		if t == nil {
			t = &envconfig.ClientConfigTLS{}
		}
		name := func(key, fallback string) string {
			if s := r.sources[key]; s != "" {
				return s
			}
			return fallback
		}
		r.tls, err = tlsconfig.Config{
			CAFile: t.ServerCACertPath, CAPEM: t.ServerCACertData,
			CertFile: t.ClientCertPath, CertPEM: t.ClientCertData,
			KeyFile: t.ClientKeyPath, KeyPEM: t.ClientKeyData,
			ServerName: t.ServerName,
			Keys: tlsconfig.Keys{
				CA:   name("tls_ca_path", c.name("tls_ca_path")),
				Cert: name("tls_cert_path", c.name("tls_cert_path")),
				Key:  name("tls_key_path", c.name("tls_key_path")),
			},
		}.Build()
		if err != nil {
			return r, fmt.Errorf("temporal %w", err)
		}
		// The Temporal CLI's TEMPORAL_TLS_DISABLE_HOST_VERIFICATION or the
		// profile's tls.disable_host_verification, honoured as it does.
		r.tls.InsecureSkipVerify = t.DisableHostVerification
	}
	r.profile = prof
	return r, nil
}

// loadProfile reads the config file's profile, noting in sources where
// each value came from. No file is fine unless one was named.
func (c Config) loadProfile(env envconfig.EnvLookup, sources map[string]string) (envconfig.ClientConfigProfile, error) {
	var prof envconfig.ClientConfigProfile
	file, fileSrc := c.ConfigFile, c.name("config_file")
	if file == "" {
		if v, _ := env.LookupEnv(EnvConfigFile); v != "" {
			file, fileSrc = v, EnvConfigFile
		}
	}
	named := file != ""
	if !named {
		file = envconfig.DefaultConfigFilePath()
	}
	name, nameSrc := c.Profile, c.name("profile")
	if name == "" {
		if v, _ := env.LookupEnv(EnvProfile); v != "" {
			name, nameSrc = v, EnvProfile
		}
	}
	var b []byte
	if file != "" {
		var err error
		b, err = os.ReadFile(file)
		switch {
		case err == nil:
		case errors.Is(err, fs.ErrNotExist) && !named:
			file = ""
		default:
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err
			}
			if !named {
				fileSrc = "the Temporal config file"
			}
			return prof, fmt.Errorf("%s %q: %w", fileSrc, file, err)
		}
	}
	if file == "" {
		if name != "" {
			return prof, fmt.Errorf("%s %q: there is no Temporal config file to take it from (looked at %s; --config-file or %s names one)",
				nameSrc, name, orNone(envconfig.DefaultConfigFilePath()), EnvConfigFile)
		}
		return prof, nil
	}
	var cc envconfig.ClientConfig
	if err := cc.FromTOML(b, envconfig.ClientConfigFromTOMLOptions{}); err != nil {
		return prof, fmt.Errorf("the Temporal config file %s: %w", file, err)
	}
	explicit := name != ""
	if !explicit {
		name = envconfig.DefaultConfigFileProfile
	}
	p := cc.Profiles[name]
	if p == nil {
		if explicit {
			have := make([]string, 0, len(cc.Profiles))
			for n := range cc.Profiles {
				have = append(have, n)
			}
			sort.Strings(have)
			return prof, fmt.Errorf("%s %q: %s has no such profile (it has: %s)", nameSrc, name, file, orNone(strings.Join(have, ", ")))
		}
		return prof, nil
	}
	prof = *p
	if prof.TLS != nil {
		t := *prof.TLS
		prof.TLS = &t
	}
	in := func(key string) string { return fmt.Sprintf("profile.%s.%s in %s", name, key, file) }
	t := prof.TLS
	if t == nil {
		t = &envconfig.ClientConfigTLS{}
	}
	for _, f := range []struct {
		key, pkey string
		set       bool
	}{
		{"address", "address", prof.Address != ""},
		{"namespace", "namespace", prof.Namespace != ""},
		{"api_key", "api_key", prof.APIKey != ""},
		{"tls", "tls", prof.TLS != nil},
		{"tls_ca_path", "tls.server_ca_cert_path", t.ServerCACertPath != ""},
		{"tls_ca_path", "tls.server_ca_cert_data", len(t.ServerCACertData) > 0},
		{"tls_cert_path", "tls.client_cert_path", t.ClientCertPath != ""},
		{"tls_cert_path", "tls.client_cert_data", len(t.ClientCertData) > 0},
		{"tls_key_path", "tls.client_key_path", t.ClientKeyPath != ""},
		{"tls_key_path", "tls.client_key_data", len(t.ClientKeyData) > 0},
		{"tls_server_name", "tls.server_name", t.ServerName != ""},
	} {
		if f.set {
			sources[f.key] = in(f.pkey)
		}
	}
	// A path and the data of one PEM, both given: the Temporal CLI
	// refuses the profile; tlsconfig would take the data and ignore the
	// path.
	for _, f := range []struct {
		pem  string
		both bool
	}{
		{"server_ca_cert", t.ServerCACertPath != "" && len(t.ServerCACertData) > 0},
		{"client_cert", t.ClientCertPath != "" && len(t.ClientCertData) > 0},
		{"client_key", t.ClientKeyPath != "" && len(t.ClientKeyData) > 0},
	} {
		if f.both {
			return prof, fmt.Errorf("profile.%s.tls in %s sets both %s_path and %s_data: give one", name, file, f.pem, f.pem)
		}
	}
	return prof, nil
}

func readKeyFile(name, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return "", fmt.Errorf("%s %q: %w", name, path, err)
	}
	key := strings.TrimSpace(string(b))
	if key == "" {
		return "", fmt.Errorf("%s %q is empty", name, path)
	}
	return key, nil
}

func isBool(s string) bool {
	switch strings.ToLower(s) {
	case "1", "0", "true", "false":
		return true
	}
	return false
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// Options returns the client options of the resolved connection, logging
// to l (nil: warnings and errors to stderr).
func (r Resolved) Options(l *slog.Logger) (client.Options, error) {
	p := r.profile
	p.TLS = nil // the TLS settings are built above, by tlsconfig
	opts, err := p.ToClientOptions(envconfig.ToClientOptionsRequest{})
	if err != nil {
		return client.Options{}, fmt.Errorf("temporal: %w", err)
	}
	opts.ConnectionOptions.TLS = r.tls
	opts.ConnectionOptions.TLSDisabled = r.tls == nil
	if l == nil {
		l = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	opts.Logger = log.NewStructuredLogger(l)
	return opts, nil
}

// Options resolves c and returns its client options (see
// Resolved.Options).
func (c Config) Options(l *slog.Logger) (client.Options, error) {
	r, err := c.Resolve()
	if err != nil {
		return client.Options{}, err
	}
	return r.Options(l)
}

// Dial connects a client to the resolved connection; the error names the
// address, never the key.
func (r Resolved) Dial(l *slog.Logger) (client.Client, error) {
	return r.DialContext(context.Background(), l)
}

// DialContext is Dial that gives up when ctx is done: a CLI interrupted
// while it connects to an unresponsive address stops at once, not after
// the client's 5 s connection timeout.
func (r Resolved) DialContext(ctx context.Context, l *slog.Logger) (client.Client, error) {
	opts, err := r.Options(l)
	if err != nil {
		return nil, err
	}
	cl, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("connect to temporal at %s: %w", r, err)
	}
	return cl, nil
}

// Dial resolves c and connects a client.
func (c Config) Dial(l *slog.Logger) (client.Client, error) {
	r, err := c.Resolve()
	if err != nil {
		return nil, err
	}
	return r.Dial(l)
}
