package temporalclient

import (
	"fmt"

	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
)

// TracingInterceptor returns the OpenTelemetry tracing interceptor of the
// slow path: client calls (start, signal, update, query), workflow runs
// and activities get spans, joined across processes through Temporal
// headers, so a checkpoint round reads as one trace from the coordinator
// to each worker's share. tp nil uses the global tracer provider.
func TracingInterceptor(tp trace.TracerProvider) (interceptor.Interceptor, error) {
	opts := temporalotel.TracerOptions{}
	if tp != nil {
		opts.Tracer = tp.Tracer("github.com/tflo-io/tflo")
	}
	i, err := temporalotel.NewTracingInterceptor(opts)
	if err != nil {
		return nil, fmt.Errorf("temporal tracing interceptor: %w", err)
	}
	return i, nil
}

// WithTracing adds the tracing interceptor over tp to opts; workers made
// from the client inherit it.
func WithTracing(opts client.Options, tp trace.TracerProvider) (client.Options, error) {
	i, err := TracingInterceptor(tp)
	if err != nil {
		return opts, err
	}
	opts.Interceptors = append(opts.Interceptors, i)
	return opts, nil
}
