package s3

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/logging"
	"github.com/aws/smithy-go/middleware"

	"github.com/tflo-io/tflo/internal/tlsconfig"
	"github.com/tflo-io/tflo/streaming"
)

// Option configures New, NewCursorStore and NewArchive.
type Option func(*config)

type config struct {
	client       *awss3.Client
	prefix       string
	region       string
	endpoint     string
	pathStyle    bool
	accessKey    string
	secretKey    string
	sessionToken string
	caPEM        []byte
	tlsConfig    *tls.Config
	httpClient   *http.Client
	apiOptions   []func(*middleware.Stack) error

	responseTimeout    time.Duration
	responseTimeoutSet bool // given with WithResponseTimeout

	compactRatio     float64
	compactMinBytes  uint64
	maxSegments      int
	readBlock        int64
	minPartSize      int64 // Archive uploads; 0 = S3's 5 MiB
	unsignedPayload  bool
	compressManifest bool
	conditional      bool
	epochFencing     bool
	shardOf          func(key []byte) (string, bool)
	logger           *slog.Logger
}

func defaultConfig() config {
	return config{
		responseTimeout:  DefaultResponseTimeout,
		compactRatio:     0.5,
		compactMinBytes:  1 << 20,
		maxSegments:      256,
		readBlock:        1 << 20,
		compressManifest: true,
		conditional:      true,
		shardOf:          streaming.CheckpointKeyShard,
		logger:           slog.Default(),
	}
}

// WithClient uses an existing S3 client instead of building one; the
// client options (WithRegion, WithEndpoint, WithPathStyle,
// WithStaticCredentials, WithCACert, WithTLSConfig, WithHTTPClient,
// WithResponseTimeout, WithAPIOptions) cannot be combined with it.
// Default: build a client.
func WithClient(c *awss3.Client) Option { return func(o *config) { o.client = c } }

// WithPrefix places every object under prefix (a trailing slash is
// added). Any number of workers may share a prefix: each shard's keys
// have their own manifest (see WithShardOf), and each shard has one
// writer. Default: the bucket root.
func WithPrefix(prefix string) Option { return func(o *config) { o.prefix = prefix } }

// WithRegion sets the signing region. Default: the standard chain
// (AWS_REGION, shared config), else "us-east-1".
func WithRegion(region string) Option { return func(o *config) { o.region = region } }

// WithEndpoint sets the base endpoint URL of an S3-compatible server
// (MinIO, versitygw, Ceph), e.g. "http://127.0.0.1:9000". Default: AWS.
func WithEndpoint(url string) Option { return func(o *config) { o.endpoint = url } }

// WithPathStyle addresses buckets as http://host/bucket/key instead of
// http://bucket.host/key, which most S3-compatible servers need. Default:
// false (virtual-hosted style).
func WithPathStyle(on bool) Option { return func(o *config) { o.pathStyle = on } }

// WithStaticCredentials signs with a fixed access key and secret (and an
// optional session token). Default: the standard credential chain
// (environment, shared files, SSO, instance roles); when it finds none,
// requests fail with an error wrapping ErrNoCredentials. The secret never
// appears in errors or logs.
func WithStaticCredentials(accessKey, secretKey, sessionToken string) Option {
	return func(o *config) { o.accessKey, o.secretKey, o.sessionToken = accessKey, secretKey, sessionToken }
}

// WithCACert trusts the PEM-encoded CA certificates (in addition to the
// system pool) for a TLS endpoint with a private CA. Default: system pool.
func WithCACert(pem []byte) Option { return func(o *config) { o.caPEM = pem } }

// WithTLSConfig sets the TLS configuration of the HTTP transport (client
// certificates, ...; the minimum version is raised to TLS 1.2). Combined
// with WithCACert, the CA is added to a clone of it. Default: Go's
// defaults with TLS 1.2 or newer.
func WithTLSConfig(c *tls.Config) Option { return func(o *config) { o.tlsConfig = c } }

// WithHTTPClient sends requests through c; it cannot be combined with
// WithCACert, WithTLSConfig or WithResponseTimeout: c's own timeouts
// (its transport's ResponseHeaderTimeout) decide how long a request
// waits for an answer, and its TLS configuration is used as it is (the
// AWS_CA_BUNDLE variable and a shared config's ca_bundle are not added to
// it). Default: the SDK's buildable client, with the response timeout of
// WithResponseTimeout.
func WithHTTPClient(c *http.Client) Option { return func(o *config) { o.httpClient = c } }

// DefaultResponseTimeout is the default of WithResponseTimeout, as
// minio-go's transport waits for response headers.
const DefaultResponseTimeout = time.Minute

// WithResponseTimeout bounds how long a request waits for the server's
// answer once it is fully sent (the HTTP transport's
// ResponseHeaderTimeout): a server that accepts a request and never
// answers fails it with an error wrapping ErrResponseTimeout that names
// the object, instead of holding it until its context ends, which some
// callers' contexts never do. Sending a request body (a segment, an
// upload part) and reading a response body are not bounded by it, so
// long uploads and downloads are not cut. The SDK retries a timed-out
// request (3 attempts by default, with a back-off of up to 2s and 4s
// between them), so a server that never answers fails a call after at
// most attempts × d plus the back-offs: about 3m6s at the default. S3
// answers a copy or a multipart completion with headers at once (errors
// follow in the body), so d need not cover them; an S3-compatible server
// that answers a large copy only when done needs d longer than the
// copy. 0 disables the bound. Default: DefaultResponseTimeout.
func WithResponseTimeout(d time.Duration) Option {
	return func(o *config) { o.responseTimeout, o.responseTimeoutSet = d, true }
}

// WithAPIOptions adds smithy middleware to every request of the built
// client, e.g. (*RequestCounter).Register. Default: none.
func WithAPIOptions(fns ...func(*middleware.Stack) error) Option {
	return func(o *config) { o.apiOptions = append(o.apiOptions, fns...) }
}

// WithCompaction sets when a commit also rewrites segments: once dead
// record bytes exceed ratio of all record bytes and at least minDeadBytes.
// A ratio of 0 disables automatic compaction (Compact still works).
// Default: 0.5 and 1 MiB.
func WithCompaction(ratio float64, minDeadBytes uint64) Option {
	return func(o *config) { o.compactRatio, o.compactMinBytes = ratio, minDeadBytes }
}

// WithMaxSegments bounds the live segments of a Store: a commit that
// would leave more than n folds the smallest (by live bytes) into its new
// segment, down to n/2 (one GET each), so many small batches do not grow
// the bucket and the manifest without bound. 0 disables the bound.
// Default: 256.
func WithMaxSegments(n int) Option { return func(o *config) { o.maxSegments = n } }

// WithReadBlockSize sets the block an Archive object fetches for reads
// smaller than it (one GET per block; each open object caches at most 4
// blocks). Reads of a block or more are one GET of exactly their range.
// Default: 1 MiB.
func WithReadBlockSize(n int64) Option { return func(o *config) { o.readBlock = n } }

// WithUnsignedPayload signs requests without hashing their bodies
// (x-amz-content-sha256: UNSIGNED-PAYLOAD), which saves a SHA-256 pass over
// every segment. Use it over TLS, where the transport protects the body;
// bodies are seekable either way, so plain http works too. Default: false
// (bodies are hashed and signed).
func WithUnsignedPayload(on bool) Option { return func(o *config) { o.unsignedPayload = on } }

// WithManifestCompression stores the manifest zstd-compressed (fastest
// level): about 2.5x fewer bytes for the index every commit rewrites, for
// a few milliseconds of CPU per 100k keys. Readers accept both forms.
// Default: true.
func WithManifestCompression(on bool) Option { return func(o *config) { o.compressManifest = on } }

// WithConditionalWrites makes every manifest PUT conditional on the ETag
// the Store last read (If-Match, or If-None-Match "*" for the first), so
// a second writer on the same prefix loses with ErrConflict instead of
// silently overwriting. Turn it off only for servers without conditional
// PUT support: each commit then rereads the manifest first (one more GET),
// which keeps a stale writer from replacing a newer manifest but cannot
// stop two commits racing. Default: true.
func WithConditionalWrites(on bool) Option { return func(o *config) { o.conditional = on } }

// WithEpochFencing makes the manifest record the highest SnapshotMeta.Epoch
// committed, and SaveBatch refuse (wrapping streaming.ErrFenced) a batch
// holding an older epoch, so a zombie owner's checkpoint changes nothing.
// Default: false.
func WithEpochFencing(on bool) Option { return func(o *config) { o.epochFencing = on } }

// WithShardOf sets how a Store tells which shard a key belongs to: each
// shard's keys get their own manifest and segments (below
// shards/<shard>/), so writers of different shards never commit to the
// same object, and the keys for which f returns false share the root
// manifest. nil puts every key in the root manifest (one commit point for
// the prefix, the layout of stores written before shards had their own).
// Default: streaming.CheckpointKeyShard, the shard of the keys a
// streaming.Checkpointer writes.
func WithShardOf(f func(key []byte) (shard string, ok bool)) Option {
	return func(o *config) { o.shardOf = f }
}

// WithLogger sets where background problems (a failed garbage delete; an
// archive's Move that finds the move done by another but could not abort
// its own copy's multipart upload) are logged, and the AWS SDK's own log
// lines, at debug level. Default: slog.Default().
func WithLogger(l *slog.Logger) Option { return func(o *config) { o.logger = l } }

func (c *config) validate(bucket string) error {
	var errs []error
	if bucket == "" {
		errs = append(errs, errors.New("the bucket name is empty"))
	}
	if c.client != nil && (c.region != "" || c.endpoint != "" || c.pathStyle || c.accessKey != "" ||
		c.caPEM != nil || c.tlsConfig != nil || c.httpClient != nil || c.responseTimeoutSet || len(c.apiOptions) > 0 || c.unsignedPayload) {
		errs = append(errs, errors.New("WithClient cannot be combined with options that build a client (region, endpoint, path style, credentials, TLS, HTTP client, response timeout, API options, unsigned payload)"))
	}
	if c.httpClient != nil && (c.caPEM != nil || c.tlsConfig != nil) {
		errs = append(errs, errors.New("WithHTTPClient cannot be combined with WithCACert or WithTLSConfig; configure TLS on the HTTP client"))
	}
	if c.httpClient != nil && c.responseTimeoutSet {
		errs = append(errs, errors.New("WithHTTPClient cannot be combined with WithResponseTimeout; set the ResponseHeaderTimeout of the HTTP client's transport"))
	}
	if c.responseTimeout < 0 {
		errs = append(errs, fmt.Errorf("response timeout %v is negative (0 disables it)", c.responseTimeout))
	}
	if c.endpoint != "" {
		if u, err := url.Parse(c.endpoint); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("endpoint %q is not an http:// or https:// URL", c.endpoint))
		}
	}
	if (c.accessKey == "") != (c.secretKey == "") {
		errs = append(errs, errors.New("static credentials need both an access key and a secret"))
	}
	if c.sessionToken != "" && c.accessKey == "" {
		// Without keys no static credentials are built: the token would
		// be dropped and the standard chain's credentials used instead.
		errs = append(errs, errors.New("static credentials with a session token need an access key and a secret"))
	}
	if c.compactRatio < 0 || c.compactRatio >= 1 {
		errs = append(errs, fmt.Errorf("compaction ratio %v is outside [0, 1)", c.compactRatio))
	}
	if c.maxSegments < 0 || c.maxSegments == 1 {
		errs = append(errs, fmt.Errorf("max segments %d: want 0 (no bound) or at least 2", c.maxSegments))
	}
	if c.readBlock < 4096 {
		errs = append(errs, fmt.Errorf("read block size %d is below 4096 bytes", c.readBlock))
	}
	if strings.HasPrefix(c.prefix, "/") {
		errs = append(errs, fmt.Errorf("prefix %q starts with a slash", c.prefix))
	}
	if c.logger == nil {
		errs = append(errs, errors.New("the logger is nil"))
	}
	return errors.Join(errs...)
}

// objectPrefix is the normalised prefix: "" or ending in "/".
func (c *config) objectPrefix() string {
	if c.prefix == "" || strings.HasSuffix(c.prefix, "/") {
		return c.prefix
	}
	return c.prefix + "/"
}

// endpointName is how errors name the server.
func (c *config) endpointName() string {
	if c.endpoint != "" {
		return c.endpoint
	}
	if c.client != nil {
		if e := c.client.Options().BaseEndpoint; e != nil {
			return *e
		}
		return "AWS S3 (region " + c.client.Options().Region + ")"
	}
	return "AWS S3 (region " + c.region + ")"
}

// buildClient returns the configured client, building it from the options
// and the standard chain when WithClient was not given.
func (c *config) buildClient(ctx context.Context) (*awss3.Client, error) {
	if c.client != nil {
		return c.client, nil
	}
	// The SDK's own log lines go to c.logger at debug level, not to its
	// default logger on stderr (sdkLogger).
	loadOpts := []func(*awsconfig.LoadOptions) error{awsconfig.WithLogger(sdkLogger{c.logger})}
	if c.region != "" {
		loadOpts = append(loadOpts, awsconfig.WithRegion(c.region))
	}
	if c.accessKey != "" {
		loadOpts = append(loadOpts, awsconfig.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(c.accessKey, c.secretKey, c.sessionToken)))
	}
	if c.httpClient == nil {
		var tc *tls.Config
		if c.caPEM != nil || c.tlsConfig != nil {
			var err error
			if tc, err = c.tls(); err != nil {
				return nil, err
			}
		}
		hc := awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
			if tc != nil {
				tr.TLSClientConfig = tc
			}
			tr.ResponseHeaderTimeout = c.responseTimeout
		})
		loadOpts = append(loadOpts, awsconfig.WithHTTPClient(hc))
	}
	awsCfg, err := awsconfig.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("s3: load AWS configuration: %w", err)
	}
	if c.httpClient != nil {
		// Set after loading: the SDK adds AWS_CA_BUNDLE to the client it
		// loads with, and refuses one it cannot add it to (a plain
		// *http.Client). The given client's TLS is its own.
		awsCfg.HTTPClient = c.httpClient
	}
	if awsCfg.Region == "" {
		awsCfg.Region = "us-east-1"
	}
	if c.accessKey == "" && awsCfg.Credentials != nil {
		awsCfg.Credentials = aws.NewCredentialsCache(chainCredentials{awsCfg.Credentials})
	}
	c.region = awsCfg.Region
	return awss3.NewFromConfig(awsCfg, func(o *awss3.Options) {
		if c.endpoint != "" {
			o.BaseEndpoint = aws.String(c.endpoint)
		}
		o.UsePathStyle = c.pathStyle
		// S3-compatible servers differ in their support of the newer
		// default checksums; send them only where the API requires.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		if c.unsignedPayload {
			o.APIOptions = append(o.APIOptions, v4.SwapComputePayloadSHA256ForUnsignedPayloadMiddleware)
		}
		o.APIOptions = append(o.APIOptions, c.apiOptions...)
	}), nil
}

// sdkLogger hands the AWS SDK's log lines to a client's logger at debug
// level. The SDK's default logger printed them on stderr: "SDK ... WARN
// falling back to IMDSv1: ..." before a command's own error whenever no
// credentials were given and no instance metadata service answered,
// though the error that follows says the same (the standard chain found
// none, no EC2 IMDS role found).
type sdkLogger struct{ log *slog.Logger }

func (l sdkLogger) Logf(class logging.Classification, format string, v ...any) {
	l.log.Debug("aws sdk: "+fmt.Sprintf(format, v...), "level", string(class))
}

func (c *config) tls() (*tls.Config, error) {
	tc, err := tlsconfig.Config{CAPEM: c.caPEM, SystemRoots: true}.Apply(c.tlsConfig)
	if err != nil {
		return nil, fmt.Errorf("s3: WithCACert: %w", err)
	}
	return tc, nil
}
