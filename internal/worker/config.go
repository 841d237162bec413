package worker

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/internal/envconfig"
	"github.com/tflo-io/tflo/internal/temporalclient"
	"github.com/tflo-io/tflo/internal/tlsconfig"
	"github.com/tflo-io/tflo/pipeline"
)

// PipelineConfig is a pipeline worker's deployment: who it is and what it
// talks to. The pipeline itself comes from its spec (--pipeline).
type PipelineConfig struct {
	// WorkerID names this process: its Temporal task queue, its lease
	// workflow and its presence lease (default: the host name). Unique
	// per process.
	WorkerID string `json:"worker_id" yaml:"worker_id"`
	// Temporal is how to reach Temporal, as the Temporal CLI does: a key
	// left empty comes from the CLI's TEMPORAL_* variable, else from the
	// selected profile of its config file (internal/temporalclient).
	// Without an address from any of them the worker checkpoints in
	// process.
	Temporal temporalclient.Config `json:"temporal" yaml:"temporal"`
	// ControlWorker also runs tflo's workflows in this process (default
	// false: another process does).
	ControlWorker bool `json:"control_worker" yaml:"control_worker"`
	// Coordination is the coordination store (NATS JetStream KV) where
	// the worker keeps its presence lease; empty: none.
	Coordination CoordinationConfig `json:"coordination" yaml:"coordination"`
	// Backfill serves the backfill workflow's activities for this
	// pipeline (archive replays into InfluxDB buckets or Kafka topics).
	Backfill BackfillConfig `json:"backfill" yaml:"backfill"`

	Metrics MetricsConfig `json:"metrics" yaml:"metrics"`
	Log     LogConfig     `json:"log" yaml:"log"`
}

// CoordinationConfig names the coordination store (package coordination,
// NATS JetStream KV) in which the worker keeps a presence lease for its id
// through the split/lease protocol: a second live process with the same
// id is refused, and the lease activity reports on it to the lease
// workflow. A worker started while no server is reachable waits for one
// (logging each retry) before it serves; once registered, an outage only
// lapses the lease (/readyz says so) until the server is back.
type CoordinationConfig struct {
	// NATSURL of a JetStream-enabled nats-server 2.11 or later; empty: no
	// coordination store.
	NATSURL string `json:"nats_url" yaml:"nats_url"`
	// NATSCredsFile is a NATS credentials file (the user JWT and NKey
	// seed nsc writes), so no password sits in the URL; empty: none (a
	// user:password in the URL still works, and errors print it
	// redacted).
	NATSCredsFile string `json:"nats_creds_file" yaml:"nats_creds_file"`
	// NATSTLS is TLS to the server (internal/tlsconfig: ca_file,
	// cert_file, key_file, server_name); setting it requires TLS even for
	// a nats:// URL. Default: none (TLS only when the server asks).
	NATSTLS *tlsconfig.Config `json:"nats_tls" yaml:"nats_tls"`
	// Job names the KV buckets ("<job>_durable", "<job>_ephemeral");
	// default "tflo". Worker ids are unique within a job.
	Job string `json:"job" yaml:"job"`
	// LeaseTTL: a worker whose presence was not renewed for this long has
	// lost its leases (default 10s, minimum 1s).
	LeaseTTL time.Duration `json:"lease_ttl" yaml:"lease_ttl"`
}

// BackfillConfig enables the backfill activities when InfluxURL or
// KafkaBrokers is set: `starter backfill start --sink influx:<db>/<rp>`
// replays the pipeline's archive into that bucket of this InfluxDB, and
// `--sink kafka:<topic>` into that topic of this Kafka cluster. s3://
// archives within a location of the pipeline's archive sinks are reached
// as that sink's s3 settings say, others as the TFLO_S3_* variables say
// (internal/archiveloc).
type BackfillConfig struct {
	// InfluxURL is the InfluxDB that influx:<db>/<rp> sinks write to.
	InfluxURL string `json:"influx_url" yaml:"influx_url"`
	// TokenEnv names the variable holding the token ("user:password" for
	// InfluxDB 1.8).
	TokenEnv string `json:"token_env" yaml:"token_env"`
	// InfluxTLS is the TLS of an https influx_url (internal/tlsconfig:
	// ca_file for a private CA, cert_file, key_file, server_name).
	InfluxTLS *tlsconfig.Config `json:"influx_tls" yaml:"influx_tls"`
	// KafkaBrokers of the cluster kafka: sinks publish to (default, when
	// influx_url is set: the brokers of the pipeline's Kafka source).
	KafkaBrokers []string `json:"kafka_brokers" yaml:"kafka_brokers"`

	// The allowlists: a backfill's input is trusted no further than these,
	// and a location or database outside them is refused with an error
	// naming it and the allowlist. Each field has its own doc comment, as
	// `worker --help` shows each key its field's first sentence.

	// ArchiveRoots are the archives a backfill may read: file:///folder
	// (folders inside it too) and s3://bucket[/prefix] (prefixes under
	// it) (default: the folders of the pipeline's archive sinks).
	ArchiveRoots []string `json:"archive_roots" yaml:"archive_roots"`
	// DatabasePrefixes: a backfill writes to, and creates, only an
	// InfluxDB database whose name starts with one (default: the
	// databases of the pipeline's influx sinks; iot_portal allows
	// iot_portal_replay).
	DatabasePrefixes []string `json:"database_prefixes" yaml:"database_prefixes"`
}

// archiveSinkS3 returns the S3 settings of pipeline p's archive sinks
// that give some, by the sink's root location: a backfill reads the
// pipeline's own archive as its sink writes it (BackfillWorker.SinkS3).
func archiveSinkS3(p pipeline.Pipeline) map[string]archiveloc.S3 {
	out := map[string]archiveloc.S3{}
	for _, s := range p.Sinks {
		a, ok := s.(pipeline.ArchiveSink)
		if pa, isPtr := s.(*pipeline.ArchiveSink); isPtr && pa != nil {
			a, ok = *pa, true
		}
		if root, err := a.Root(); ok && err == nil && a.S3 != (archiveloc.S3{}) && strings.HasPrefix(root, "s3://") {
			out[root] = a.S3
		}
	}
	return out
}

// allowlists returns the backfill allowlists: the configured ones, or the
// defaults of pipeline p (its archive folders, its influx databases);
// never nil, so an empty result refuses everything.
func (b BackfillConfig) allowlists(p pipeline.Pipeline) (roots, prefixes []string) {
	roots, prefixes = b.ArchiveRoots, b.DatabasePrefixes
	archive := func(s pipeline.ArchiveSink) {
		if b.ArchiveRoots != nil {
			return
		}
		// dir or location: a sink whose location does not parse fails
		// the pipeline's own validation, so it allows nothing here.
		if root, err := s.Root(); err == nil {
			roots = append(roots, root)
		}
	}
	influx := func(s pipeline.InfluxSink) {
		if db, _, _ := strings.Cut(s.Bucket, "/"); b.DatabasePrefixes == nil && db != "" {
			prefixes = append(prefixes, db)
		}
	}
	for _, s := range p.Sinks {
		switch s := s.(type) {
		case pipeline.ArchiveSink:
			archive(s)
		case *pipeline.ArchiveSink:
			archive(*s)
		case pipeline.InfluxSink:
			influx(s)
		case *pipeline.InfluxSink:
			influx(*s)
		}
	}
	if roots == nil {
		roots = []string{}
	}
	if prefixes == nil {
		prefixes = []string{}
	}
	return roots, prefixes
}

// enabled reports whether the worker serves backfills.
func (b BackfillConfig) enabled() bool { return b.InfluxURL != "" || len(b.KafkaBrokers) > 0 }

// Logging implements Config.
func (c *PipelineConfig) Logging() LogConfig { return c.Log }

// MetricsAddr implements Config.
func (c *PipelineConfig) MetricsAddr() string { return c.Metrics.Addr }

// ApplyDefaults fills what the file and environment left empty.
func (c *PipelineConfig) ApplyDefaults() {
	if c.Coordination.Job == "" {
		c.Coordination.Job = "tflo"
	}
	if c.Coordination.LeaseTTL == 0 {
		c.Coordination.LeaseTTL = 10 * time.Second
	}
	c.Temporal.KeyPath = "temporal"
	c.Log.ApplyDefaults()
}

// DefaultNotes implements defaultNoter: worker_id left empty stays empty
// (a worker named by its host name joins Kafka as a dynamic member, see
// pipeline.KafkaSource.StaticMembership), but it names the worker by the
// host name.
func (c *PipelineConfig) DefaultNotes() map[string]string {
	if c.WorkerID != "" {
		return nil
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		return map[string]string{"worker_id": "the host name (unknown: the worker will not start without worker_id)"}
	}
	return map[string]string{"worker_id": fmt.Sprintf("the host name, %q", host)}
}

// temporal resolves the Temporal connection; ok is false when no key,
// TEMPORAL_* variable or profile gives an address (the worker then
// checkpoints in process).
func (c *PipelineConfig) temporal() (r temporalclient.Resolved, ok bool, err error) {
	r, err = c.Temporal.Resolve()
	if err != nil {
		return r, false, err
	}
	return r, r.Source("address") != "default", nil
}

// PrintResolved prints the Temporal connection the worker dials, each
// value with where it came from: a temporal.* key left empty falls back
// to a TEMPORAL_* variable, then the Temporal CLI's profile, which the
// loaded values above do not show (--print-config).
func (c *PipelineConfig) PrintResolved(w io.Writer, origins envconfig.Origins) error {
	r, ok, err := c.temporal()
	if err != nil {
		return err
	}
	if !ok {
		_, err := fmt.Fprintf(w, "# temporal: none (no temporal.address, %s or profile address): checkpoints are coordinated in process\n", temporalclient.EnvAddress)
		return err
	}
	// A setting of c is named by its key: give its file line or variable.
	from := func(key string) string {
		s := r.Source(key)
		if rest, ok := strings.CutPrefix(s, c.Temporal.KeyPath+"."); ok {
			return origins.Of(c.Temporal.KeyPath + "." + rest)
		}
		if s == "" || s == "default" {
			return "default"
		}
		if strings.HasPrefix(s, "TEMPORAL_") {
			return "env " + s
		}
		return s
	}
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "# temporal connection as dialled (empty temporal.* keys fall back to TEMPORAL_* variables, then the CLI's profile):\n")
	fmt.Fprintf(tw, "#   address = %q\t# %s\n", r.Address, from("address"))
	fmt.Fprintf(tw, "#   namespace = %q\t# %s\n", r.Namespace, from("namespace"))
	fmt.Fprintf(tw, "#   tls = %t\t# %s\n", r.TLS, from("tls"))
	if r.APIKey {
		fmt.Fprintf(tw, "#   api_key = <redacted>\t# %s\n", from("api_key"))
	}
	return tw.Flush()
}

// Validate reports every problem, as sentences.
func (c *PipelineConfig) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf("worker config: "+format, args...)) }
	_, temporal, err := c.temporal()
	if err != nil {
		add("%v", err)
	}
	if c.WorkerID != "" && (temporal || c.Coordination.NATSURL != "") && !coordination.ValidKey(c.WorkerID) {
		add("worker_id %q cannot name a lease: use letters, digits, '_', '=', '-' and '.' between tokens", c.WorkerID)
	}
	if c.ControlWorker && !temporal && err == nil {
		add("control_worker needs temporal.address (or %s)", temporalclient.EnvAddress)
	}
	if c.Backfill.enabled() && !temporal && err == nil {
		add("backfill needs temporal.address (or %s): the backfill workflow runs on Temporal", temporalclient.EnvAddress)
	}
	if t := c.Backfill.InfluxTLS; t != nil {
		if err := t.Validate(); err != nil {
			add("backfill.influx_tls: %v", err)
		}
	}
	if _, err := archiveloc.ParseRoots("backfill.archive_roots", c.Backfill.ArchiveRoots); err != nil {
		add("%v", err)
	}
	for _, p := range c.Backfill.DatabasePrefixes {
		if p == "" {
			add("backfill.database_prefixes: an empty prefix would allow every database; list the prefixes")
		}
	}
	if c.Coordination.NATSURL != "" {
		if !validJob(c.Coordination.Job) {
			add("coordination.job %q must be letters, digits, '_' or '-' (it names the KV buckets)", c.Coordination.Job)
		}
		if c.Coordination.LeaseTTL < time.Second {
			add("coordination.lease_ttl %v is below the 1s minimum", c.Coordination.LeaseTTL)
		}
		if t := c.Coordination.NATSTLS; t != nil {
			if err := t.Validate(); err != nil {
				add("coordination.nats_tls: %v", err)
			}
		}
	}
	// Checked here, so --check refuses it as bad usage, rather than the
	// run failing on the listener after the pipeline started.
	if err := c.Metrics.Validate(); err != nil {
		add("%v", err)
	}
	if err := c.Log.Validate(); err != nil {
		add("%v", err)
	}
	return errors.Join(errs...)
}

// ignored returns the settings that are set but turned off by an empty
// key that enables their feature, as sentences: the worker warns of each
// at start and at --check (not refused: deployments set such variables
// for every worker, and a feature off is a choice).
func (c PipelineConfig) ignored() []string {
	var out []string
	note := func(set bool, key, why string) {
		if set {
			out = append(out, key+" is set but ignored: "+why)
		}
	}
	if !c.Backfill.enabled() {
		const off = "backfills are off (backfill.influx_url and backfill.kafka_brokers are empty)"
		b := c.Backfill
		note(b.TokenEnv != "", "backfill.token_env", off)
		note(b.InfluxTLS != nil, "backfill.influx_tls", off)
		note(b.ArchiveRoots != nil, "backfill.archive_roots", off)
		note(b.DatabasePrefixes != nil, "backfill.database_prefixes", off)
	}
	if cc := c.Coordination; cc.NATSURL == "" {
		const off = "coordination.nats_url is empty (no coordination store, no presence lease)"
		note(cc.NATSCredsFile != "", "coordination.nats_creds_file", off)
		note(cc.NATSTLS != nil, "coordination.nats_tls", off)
		note(cc.Job != "" && cc.Job != "tflo", "coordination.job", off)
		note(cc.LeaseTTL != 0 && cc.LeaseTTL != 10*time.Second, "coordination.lease_ttl", off)
	}
	return out
}

func validJob(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '-' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}
