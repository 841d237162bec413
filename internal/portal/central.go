package portal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/files"
	"github.com/tflo-io/tflo/workers/central"
)

// CentralConfig is a central worker's configuration: workers/central's
// Config plus where checkpoints are kept durably, metrics and logs.
type CentralConfig struct {
	central.Config `yaml:",inline"`

	// Durable is where checkpoints go so that the next owner of a
	// partition can restore them. Empty: the worker's own Badger folder
	// (one worker per machine only).
	Durable DurableConfig `json:"durable" yaml:"durable"`

	// Backfill also serves the backfill workflow's activities
	// (workflows.BackfillTaskQueue) in this process, writing to the
	// InfluxDB of influx.url (`starter backfill start --sink
	// influx:<db>/<rp>`) or to a topic of kafka.brokers (`--sink
	// kafka:<topic>`); s3:// archives are reached as the TFLO_S3_*
	// variables say (internal/archiveloc).
	Backfill bool `json:"backfill" yaml:"backfill"`

	Metrics MetricsConfig `json:"metrics" yaml:"metrics"`
	Log     LogConfig     `json:"log" yaml:"log"`
}

// StartBackfill starts a BackfillWorker for cfg (Backfill set) on its own
// Temporal connection; stop it with the returned function.
func StartBackfill(ctx context.Context, cfg CentralConfig, log *slog.Logger) (stop func(), err error) {
	if !cfg.Backfill {
		return func() {}, nil
	}
	if cfg.Temporal.Address == "" || cfg.Influx.URL == "" {
		return nil, errors.New("central config: backfill needs temporal.address and influx.url")
	}
	copts, err := cfg.Temporal.ClientOptions()
	if err != nil {
		return nil, err
	}
	copts.Logger = tlog.NewStructuredLogger(log)
	tc, err := client.DialContext(ctx, copts)
	if err != nil {
		return nil, fmt.Errorf("backfill worker: dial temporal %s: %w", cfg.Temporal.Address, err)
	}
	token := cfg.Influx.Token
	if cfg.Influx.TokenEnv != "" {
		token = os.Getenv(cfg.Influx.TokenEnv)
	}
	b := &BackfillWorker{URL: cfg.Influx.URL, Token: token, Brokers: cfg.Kafka.Brokers, S3: archiveloc.S3FromEnv(os.LookupEnv), Log: log}
	if err := b.Start(tc); err != nil {
		tc.Close()
		return nil, err
	}
	return func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b.Close(cctx)
		tc.Close()
	}, nil
}

// DurableConfig names a durable checkpoint store shared by the central
// workers: a folder every worker can reach, or an S3 bucket.
type DurableConfig struct {
	// Dir is a shared folder (workers on one machine, as in the demo).
	Dir string `json:"dir" yaml:"dir"`
	// S3 is a bucket (MinIO in docker-compose.yml).
	S3 S3Config `json:"s3" yaml:"s3"`
}

// S3Config reaches an S3 bucket.
type S3Config struct {
	Bucket   string `json:"bucket" yaml:"bucket"`
	Prefix   string `json:"prefix" yaml:"prefix"`
	Endpoint string `json:"endpoint" yaml:"endpoint"` // e.g. http://minio:9000 (path-style)
	Region   string `json:"region" yaml:"region"`     // default us-east-1
	// AccessKeyEnv and SecretKeyEnv name the variables holding the keys.
	AccessKeyEnv string `json:"access_key_env" yaml:"access_key_env"`
	SecretKeyEnv string `json:"secret_key_env" yaml:"secret_key_env"`
}

// Validate reports every problem, as sentences.
func (c CentralConfig) Validate() error {
	var errs []error
	if err := c.Config.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.Durable.Dir != "" && c.Durable.S3.Bucket != "" {
		errs = append(errs, fmt.Errorf("central config: durable.dir %q and durable.s3.bucket %q are both set: choose one", c.Durable.Dir, c.Durable.S3.Bucket))
	}
	if c.Durable.Dir == "" && c.Durable.S3.Bucket == "" && c.State.Dir == "" {
		errs = append(errs, errors.New("central config: state.dir is empty and no durable store is set: checkpoints would have nowhere to go"))
	}
	if err := c.Log.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("central config: %w", err))
	}
	return errors.Join(errs...)
}

// NewCentral builds a central worker from cfg: the durable store (opened
// here, closed when the returned close function is called after Run),
// the logger and the registry. opts are passed to central.New after the
// ones NewCentral derives.
func NewCentral(ctx context.Context, cfg CentralConfig, log *slog.Logger, reg prometheus.Registerer, opts ...central.Option) (*central.Worker, func() error, error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, err
	}
	closeFn := func() error { return nil }
	o := []central.Option{central.WithLogger(log)}
	if reg != nil {
		o = append(o, central.WithRegisterer(reg))
	}
	var durable streaming.StateStore
	switch {
	case cfg.Durable.Dir != "":
		fs, err := files.Open(cfg.Durable.Dir)
		if err != nil {
			return nil, nil, fmt.Errorf("central %q: durable folder %s: %w", cfg.WorkerID, cfg.Durable.Dir, err)
		}
		durable, closeFn = fs, fs.Close
	case cfg.Durable.S3.Bucket != "":
		s := cfg.Durable.S3
		so := []s3.Option{s3.WithPrefix(s.Prefix), s3.WithLogger(log)}
		if s.Endpoint != "" {
			so = append(so, s3.WithEndpoint(s.Endpoint), s3.WithPathStyle(true))
		}
		if s.Region != "" {
			so = append(so, s3.WithRegion(s.Region))
		}
		if s.AccessKeyEnv != "" {
			so = append(so, s3.WithStaticCredentials(os.Getenv(s.AccessKeyEnv), os.Getenv(s.SecretKeyEnv), ""))
		}
		st, err := s3.New(ctx, s.Bucket, so...)
		if err != nil {
			return nil, nil, fmt.Errorf("central %q: durable bucket %s: %w", cfg.WorkerID, s.Bucket, err)
		}
		durable = st
	}
	if durable != nil {
		o = append(o, central.WithDurableStore(durable))
	}
	w, err := central.New(cfg.Config, append(o, opts...)...)
	if err != nil {
		_ = closeFn()
		return nil, nil, err
	}
	return w, closeFn, nil
}
