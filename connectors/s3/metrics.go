package s3

import (
	"context"
	"time"

	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/prometheus/client_golang/prometheus"
)

// RequestMetrics is the Prometheus backend of the request hook: every
// attempt an S3 client sends (retries included), by operation and outcome,
// its latency and its body bytes. Register it on a client with
// WithAPIOptions(m.Register); one RequestMetrics may serve several
// clients (label them apart with the bucket label given to NewRequestMetrics).
type RequestMetrics struct {
	bucket   string
	Requests *prometheus.CounterVec   // bucket, operation, outcome ("ok", "error")
	Seconds  *prometheus.HistogramVec // bucket, operation
	Bytes    *prometheus.CounterVec   // bucket, operation: request body bytes
}

// NewRequestMetrics creates the collectors for bucket and registers them
// with reg (nil: not registered).
func NewRequestMetrics(reg prometheus.Registerer, bucket string) *RequestMetrics {
	const ns, sub = "tflo", "s3"
	m := &RequestMetrics{
		bucket: bucket,
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "requests_total",
			Help: "S3 request attempts by operation and outcome."}, []string{"bucket", "operation", "outcome"}),
		Seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: ns, Subsystem: sub, Name: "request_seconds",
			Help: "S3 request attempt latency.", Buckets: prometheus.ExponentialBuckets(0.001, 2, 15)}, []string{"bucket", "operation"}),
		Bytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Subsystem: sub, Name: "request_bytes_total",
			Help: "S3 request body bytes sent."}, []string{"bucket", "operation"}),
	}
	if reg != nil {
		reg.MustRegister(m.Requests, m.Seconds, m.Bytes)
	}
	return m
}

// Register adds the measuring middleware at the end of the finalize step
// (once per attempt).
func (m *RequestMetrics) Register(stack *middleware.Stack) error {
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("tflo/s3/RequestMetrics",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			op := middleware.GetOperationName(ctx)
			if req, ok := in.Request.(*smithyhttp.Request); ok && req.ContentLength > 0 {
				m.Bytes.WithLabelValues(m.bucket, op).Add(float64(req.ContentLength))
			}
			start := time.Now()
			out, md, err := next.HandleFinalize(ctx, in)
			m.Seconds.WithLabelValues(m.bucket, op).Observe(time.Since(start).Seconds())
			outcome := "ok"
			if err != nil {
				outcome = "error"
			}
			m.Requests.WithLabelValues(m.bucket, op, outcome).Inc()
			return out, md, err
		}), middleware.After)
}
