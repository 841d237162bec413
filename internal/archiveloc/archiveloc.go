package archiveloc

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/connectors/s3"
)

// Location is a parsed archive location.
type Location struct {
	// Scheme is "file" or "s3".
	Scheme string
	// Dir is the archive's folder (file).
	Dir string
	// Bucket and Prefix locate the archive on S3 (s3; Prefix may be "").
	Bucket string
	Prefix string
}

// Examples of valid locations, for error messages and help texts.
const Examples = "file:///var/tflo/archive or s3://bucket/prefix"

// Parse checks and parses an archive location: file:///absolute/dir or
// s3://bucket[/prefix] (no "." or ".." element in the prefix). The error
// names the location and what is wrong.
func Parse(s string) (Location, error) {
	bad := func(why string) (Location, error) {
		return Location{}, fmt.Errorf("archive location %q: %s (want %s)", s, why, Examples)
	}
	if s == "" {
		return bad("empty")
	}
	u, err := url.Parse(s)
	if err != nil {
		return bad(err.Error())
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return bad("a file:// location needs an absolute path after three slashes")
		}
		if u.Path == "" || !strings.HasPrefix(u.Path, "/") {
			return bad("a file:// location needs an absolute path")
		}
		if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.User != nil {
			// A '#' or '?' in a folder name begins a fragment or a
			// query, which would be dropped: the location would name
			// another folder.
			return bad("a file:// location is only a folder (write '#' as %23 and '?' as %3F)")
		}
		return Location{Scheme: "file", Dir: u.Path}, nil
	case "s3":
		if u.Host == "" {
			return bad("no bucket")
		}
		if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || u.User != nil {
			return bad("an s3:// location is only a bucket and a prefix")
		}
		prefix := strings.Trim(u.Path, "/")
		// S3 keys are literal: s3://b/x/../prod reads keys under
		// "x/../prod/", not under "prod/" as Within (which cleans the
		// path) would take it, letting a location escape an allowlist.
		for _, e := range strings.Split(prefix, "/") {
			if e == "." || e == ".." {
				return bad("an s3:// prefix has no '.' or '..' elements (S3 keys are literal)")
			}
		}
		return Location{Scheme: "s3", Bucket: u.Host, Prefix: prefix}, nil
	case "":
		return bad("no scheme")
	}
	return bad(fmt.Sprintf("unsupported scheme %q", u.Scheme))
}

// String returns the location as a URL.
func (l Location) String() string {
	if l.Scheme == "s3" {
		if l.Prefix == "" {
			return "s3://" + l.Bucket
		}
		return "s3://" + l.Bucket + "/" + l.Prefix
	}
	// Escaped, so a folder name with '#', '?' or '%' parses back to itself.
	return (&url.URL{Scheme: "file", Path: l.Dir}).String()
}

// S3 says how to reach S3 for s3:// locations, as the other S3 settings
// of tflo do (internal/portal's durable store): an endpoint for an
// S3-compatible server (path-style addressing then), a region, and the
// names of the environment variables holding the access key and secret.
// Empty fields fall back to the AWS standard chain (AWS_REGION,
// AWS_ACCESS_KEY_ID, shared files, instance roles).
type S3 struct {
	Endpoint     string `json:"endpoint,omitempty" yaml:"endpoint"`
	Region       string `json:"region,omitempty" yaml:"region"`
	AccessKeyEnv string `json:"access_key_env,omitempty" yaml:"access_key_env"`
	SecretKeyEnv string `json:"secret_key_env,omitempty" yaml:"secret_key_env"`
	// CAFile is a PEM file of a private CA the endpoint's certificate is
	// signed by, trusted beside the system roots (empty: the system roots).
	CAFile string `json:"ca_file,omitempty" yaml:"ca_file"`
	// ResponseTimeout is how long a request waits for the server's answer
	// once sent (a Go duration; 0: 1m, s3.DefaultResponseTimeout); the SDK
	// tries 3 times, so a server that never answers fails a call after 3
	// timeouts and up to 6s of back-off.
	ResponseTimeout time.Duration `json:"response_timeout,omitempty" yaml:"response_timeout"`
}

// Environment variables S3FromEnv reads.
const (
	EnvEndpoint     = "TFLO_S3_ENDPOINT"
	EnvRegion       = "TFLO_S3_REGION"
	EnvAccessKeyEnv = "TFLO_S3_ACCESS_KEY_ENV"
	EnvSecretKeyEnv = "TFLO_S3_SECRET_KEY_ENV"
	EnvCAFile       = "TFLO_S3_CA_FILE"
	// EnvResponseTimeout is a Go duration (unset or empty: the default).
	EnvResponseTimeout = "TFLO_S3_RESPONSE_TIMEOUT"
)

// EnvVariables are the variables S3FromEnv reads.
var EnvVariables = []string{EnvEndpoint, EnvRegion, EnvAccessKeyEnv, EnvSecretKeyEnv, EnvCAFile, EnvResponseTimeout}

// S3FromEnv returns the settings in the TFLO_S3_* variables. A response
// timeout that is not a Go duration, or is negative, is an error naming
// the variable and its value, returned with the other settings (the
// timeout 0), so that a caller given the timeout another way (starter
// archive --s3-response-timeout) can go on without it.
func S3FromEnv(lookup func(string) (string, bool)) (S3, error) {
	get := func(k string) string { v, _ := lookup(k); return v }
	c := S3{Endpoint: get(EnvEndpoint), Region: get(EnvRegion), AccessKeyEnv: get(EnvAccessKeyEnv), SecretKeyEnv: get(EnvSecretKeyEnv), CAFile: get(EnvCAFile)}
	if v := get(EnvResponseTimeout); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			return c, fmt.Errorf("%s %q: not a Go duration (e.g. 30s or 2m)", EnvResponseTimeout, v)
		}
		if d < 0 {
			return c, fmt.Errorf("%s %q: negative (unset or 0: the default, %v)", EnvResponseTimeout, v, s3.DefaultResponseTimeout)
		}
		c.ResponseTimeout = d
	}
	return c, nil
}

// Validate reports a half-given key pair and a negative response timeout.
func (c S3) Validate() error {
	if (c.AccessKeyEnv == "") != (c.SecretKeyEnv == "") {
		return errors.New("s3 settings: name both the access key and the secret key variables, or neither (for the AWS standard chain)")
	}
	if c.ResponseTimeout < 0 {
		return fmt.Errorf("s3 settings: response_timeout %v is negative (0: the default, %v)", c.ResponseTimeout, s3.DefaultResponseTimeout)
	}
	return nil
}

// Options returns the connectors/s3 options of these settings; getenv
// reads the key variables (os.Getenv in production).
func (c S3) Options(getenv func(string) string) []s3.Option {
	var o []s3.Option
	if c.Endpoint != "" {
		o = append(o, s3.WithEndpoint(c.Endpoint), s3.WithPathStyle(true))
	}
	if c.Region != "" {
		o = append(o, s3.WithRegion(c.Region))
	}
	if c.AccessKeyEnv != "" {
		o = append(o, s3.WithStaticCredentials(getenv(c.AccessKeyEnv), getenv(c.SecretKeyEnv), ""))
	}
	if c.ResponseTimeout > 0 {
		o = append(o, s3.WithResponseTimeout(c.ResponseTimeout))
	}
	return o
}

// ErrNotFound: the local archive folder a reader named does not exist
// (OpenExisting). A typo in a path used to list or replay an empty
// archive, and left an empty folder behind.
var ErrNotFound = errors.New("no such folder")

// OpenExisting opens the archive at loc for reading: as Open, but a local
// folder must exist already (an error wrapping ErrNotFound names it) and
// is never created. An S3 prefix with no objects is an empty archive, as
// a listing of it is.
func OpenExisting(ctx context.Context, loc Location, c S3, extra ...s3.Option) (parquet.Archive, error) {
	if loc.Scheme == "file" {
		fi, err := os.Stat(loc.Dir)
		switch {
		case errors.Is(err, os.ErrNotExist):
			return nil, fmt.Errorf("archive %s: %w", loc, ErrNotFound)
		case err != nil:
			return nil, fmt.Errorf("archive %s: %w", loc, err)
		case !fi.IsDir():
			return nil, fmt.Errorf("archive %s: %s is a file, not a folder", loc, loc.Dir)
		}
	}
	return Open(ctx, loc, c, extra...)
}

// Open opens the archive at loc for writing, creating a local folder if
// needed (readers use OpenExisting). extra options apply to S3 archives
// after the settings' own.
func Open(ctx context.Context, loc Location, c S3, extra ...s3.Option) (parquet.Archive, error) {
	switch loc.Scheme {
	case "file":
		a, err := parquet.NewLocalArchive(loc.Dir)
		if err != nil {
			return nil, fmt.Errorf("archive %s: %w", loc, err)
		}
		return a, nil
	case "s3":
		if err := c.Validate(); err != nil {
			return nil, err
		}
		if c.AccessKeyEnv != "" {
			// Both variables must hold a key: two empty keys would fall
			// back to the AWS standard chain, other credentials than the
			// settings name, and one alone was refused without saying
			// which variable is missing.
			for _, v := range [...]struct{ key, name string }{{"access_key_env", c.AccessKeyEnv}, {"secret_key_env", c.SecretKeyEnv}} {
				if os.Getenv(v.name) == "" {
					return nil, fmt.Errorf("archive %s: s3 %s names %s, which is unset or empty", loc, v.key, v.name)
				}
			}
		}
		opts := append(c.Options(os.Getenv), s3.WithPrefix(loc.Prefix))
		if c.CAFile != "" {
			pem, err := os.ReadFile(c.CAFile)
			if err != nil {
				return nil, fmt.Errorf("archive %s: s3 ca_file: %w", loc, err)
			}
			opts = append(opts, s3.WithCACert(pem))
		}
		a, err := s3.NewArchive(ctx, loc.Bucket, append(opts, extra...)...)
		if err != nil {
			return nil, fmt.Errorf("archive %s: %w", loc, err)
		}
		return a, nil
	}
	return nil, fmt.Errorf("archive location %s: unsupported scheme %q", loc, loc.Scheme)
}

// Resolver returns a function that parses a location string and opens
// its archive for reading (OpenExisting; once per location, then reused),
// with the name prefix "" (the location is the archive's root). Its
// errors name the location.
func Resolver(c S3, extra ...s3.Option) func(location string) (parquet.Archive, string, error) {
	var mu sync.Mutex
	open := map[string]parquet.Archive{}
	return func(location string) (parquet.Archive, string, error) {
		loc, err := Parse(location)
		if err != nil {
			return nil, "", err
		}
		mu.Lock()
		defer mu.Unlock()
		if a := open[loc.String()]; a != nil {
			return a, "", nil
		}
		a, err := OpenExisting(context.Background(), loc, c, extra...)
		if err != nil {
			return nil, "", err
		}
		open[loc.String()] = a
		return a, "", nil
	}
}
