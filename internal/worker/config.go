package worker

import (
	"errors"
	"fmt"
	"time"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/internal/temporalclient"
)

// PipelineConfig is a pipeline worker's deployment: who it is and what it
// talks to. The pipeline itself comes from its spec (--pipeline).
type PipelineConfig struct {
	// WorkerID names this process: its Temporal task queue, its lease
	// workflow and its presence lease (default: the host name). Unique
	// per process.
	WorkerID string `json:"worker_id" yaml:"worker_id"`
	// Temporal is how to reach Temporal (also the official TEMPORAL_*
	// variables). Without an address the worker checkpoints in process.
	Temporal temporalclient.Config `json:"temporal" yaml:"temporal"`
	// ControlWorker also runs tflo's workflows in this process (default
	// false: another process does).
	ControlWorker bool `json:"control_worker" yaml:"control_worker"`
	// Coordination is the coordination store (NATS JetStream KV) where
	// the worker keeps its presence lease; empty: none.
	Coordination CoordinationConfig `json:"coordination" yaml:"coordination"`
	// Backfill serves the backfill workflow's activities for this
	// pipeline (archive replays into InfluxDB buckets).
	Backfill BackfillConfig `json:"backfill" yaml:"backfill"`

	Metrics MetricsConfig `json:"metrics" yaml:"metrics"`
	Log     LogConfig     `json:"log" yaml:"log"`
}

// CoordinationConfig names the coordination store (package coordination,
// NATS JetStream KV) in which the worker keeps a presence lease for its id
// through the split/lease protocol: a second live process with the same
// id is refused, and the lease activity reports on it to the lease
// workflow.
type CoordinationConfig struct {
	// NATSURL of a JetStream-enabled nats-server 2.11 or later; empty: no
	// coordination store.
	NATSURL string `json:"nats_url" yaml:"nats_url"`
	// Job names the KV buckets ("<job>_durable", "<job>_ephemeral");
	// default "tflo". Worker ids are unique within a job.
	Job string `json:"job" yaml:"job"`
	// LeaseTTL: a worker whose presence was not renewed for this long has
	// lost its leases (default 10s, minimum 1s).
	LeaseTTL time.Duration `json:"lease_ttl" yaml:"lease_ttl"`
}

// BackfillConfig enables the backfill activities when InfluxURL is set:
// `starter backfill start --sink influx:<db>/<rp>` replays the pipeline's
// archive into that bucket of this InfluxDB.
type BackfillConfig struct {
	InfluxURL string `json:"influx_url" yaml:"influx_url"`
	// TokenEnv names the variable holding the token ("user:password" for
	// InfluxDB 1.8).
	TokenEnv string `json:"token_env" yaml:"token_env"`
}

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
	c.Temporal = c.Temporal.FromEnv()
}

// Validate reports every problem, as sentences.
func (c *PipelineConfig) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf("worker config: "+format, args...)) }
	if c.WorkerID != "" && (c.Temporal.Address != "" || c.Coordination.NATSURL != "") && !coordination.ValidKey(c.WorkerID) {
		add("worker_id %q cannot name a lease: use letters, digits, '_', '=', '-' and '.' between tokens", c.WorkerID)
	}
	if err := c.Temporal.Validate(); err != nil {
		add("%v", err)
	}
	if c.ControlWorker && c.Temporal.Address == "" {
		add("control_worker needs temporal.address")
	}
	if c.Backfill.InfluxURL != "" && c.Temporal.Address == "" {
		add("backfill needs temporal.address (the backfill workflow runs on Temporal)")
	}
	if c.Coordination.NATSURL != "" {
		if !validJob(c.Coordination.Job) {
			add("coordination.job %q must be letters, digits, '_' or '-' (it names the KV buckets)", c.Coordination.Job)
		}
		if c.Coordination.LeaseTTL < time.Second {
			add("coordination.lease_ttl %v is below the 1s minimum", c.Coordination.LeaseTTL)
		}
	}
	if err := c.Log.Validate(); err != nil {
		add("%v", err)
	}
	return errors.Join(errs...)
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
