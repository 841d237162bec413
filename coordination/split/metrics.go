package split

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the protocol's Prometheus collectors, labelled by worker.
// Store operation durations come from coordination/metered (wrap the store
// given to NewWorker).
type Metrics struct {
	Owned        *prometheus.GaugeVec     // worker
	Draining     *prometheus.GaugeVec     // worker
	Quarantined  *prometheus.GaugeVec     // worker (as seen by that worker)
	Acquisitions *prometheus.CounterVec   // worker
	Losses       *prometheus.CounterVec   // worker, reason
	Revocations  *prometheus.CounterVec   // worker, outcome (graceful, forced, lost)
	AssignTime   *prometheus.HistogramVec // worker (leader only)
}

// Loss reasons.
const (
	LossReleased   = "released"   // graceful release (handler returned nil)
	LossFailed     = "failed"     // handler returned an error
	LossSelfFence  = "self_fence" // a full lease passed without a successful renewal
	LossLeaseLost  = "lease_lost" // renewal CAS lost: the lease expired or was replaced
	LossFenced     = "fenced"     // a commit or release CAS lost
	LossRevoked    = "revoked"    // cooperative revocation completed
	LossForced     = "forced"     // revocation forced at the drain deadline
	LossShutdown   = "shutdown"   // worker stopping
	LossDuplicated = "duplicate"  // a twin worker was detected
)

// NewMetrics creates the collectors and registers them with reg (nil: not
// registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	const ns, sub = "tflo", "split"
	m := &Metrics{
		Owned:        prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "owned", Help: "Splits this worker owns."}, []string{"worker"}),
		Draining:     prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "draining", Help: "Owned splits under cooperative revocation."}, []string{"worker"}),
		Quarantined:  prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: ns, Subsystem: sub, Name: "quarantined", Help: "Quarantined splits as seen by this worker."}, []string{"worker"}),
		Acquisitions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "acquisitions_total", Help: "Splits claimed."}, []string{"worker"}),
		Losses:       prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "losses_total", Help: "Tenancies ended, by reason."}, []string{"worker", "reason"}),
		Revocations:  prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "revocations_total", Help: "Cooperative revocations by outcome."}, []string{"worker", "outcome"}),
		AssignTime: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "assignment_seconds", Help: "Leader time to compute an assignment.",
			Buckets: prometheus.ExponentialBuckets(10e-6, 2, 18)}, []string{"worker"}),
	}
	if reg != nil {
		reg.MustRegister(m.Owned, m.Draining, m.Quarantined, m.Acquisitions, m.Losses, m.Revocations, m.AssignTime)
	}
	return m
}
