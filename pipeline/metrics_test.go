package pipeline_test

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/testsuite/s3test"
)

// TestWorkersShareARegistry: registering the S3 checkpoint store's
// collectors panicked when a second worker used the same registry; the
// collectors of the parts a worker opens carry the pipeline label, so
// workers of two pipelines share one registry, and a second worker of
// the same pipeline is refused with an error.
func TestWorkersShareARegistry(t *testing.T) {
	c := newCluster(t, 1)
	s3 := s3test.Start(t, "ckpt")
	t.Setenv("SHARE_S3_KEY", s3.AccessKey)
	t.Setenv("SHARE_S3_SECRET", s3.SecretKey)
	reg := prometheus.NewRegistry()
	newWorker := func(name string) (*pipeline.Worker, error) {
		p := alarmPipeline(c.ListenAddrs(), "")
		p.Name = name
		p.State.Durable = pipeline.Durable{S3: &pipeline.S3Store{Bucket: "ckpt", Prefix: name, Endpoint: s3.URL, Region: "us-east-1",
			AccessKeyEnv: "SHARE_S3_KEY", SecretKeyEnv: "SHARE_S3_SECRET"}}
		return pipeline.NewWorker(context.Background(), p, pipeline.WithWorkerID(name+"-1"), pipeline.WithMetrics(reg))
	}
	a, err := newWorker("plant-a")
	require.NoError(t, err)
	defer a.Close()
	b, err := newWorker("plant-b")
	require.NoError(t, err, "another pipeline's worker on the same registry")
	defer b.Close()
	_, err = newWorker("plant-a")
	require.ErrorContains(t, err, "durable bucket ckpt: metrics")
}

// TestInfluxSinksOfOneBucketKeepTheMetricsScrapable: two InfluxDB sinks
// writing buckets of the same name (on two servers) made their metrics
// two series with the same labels, and every gather of the registry
// failed (a worker's /metrics answered 500); each sink's series carry
// its index among the pipeline's sinks.
func TestInfluxSinksOfOneBucketKeepTheMetricsScrapable(t *testing.T) {
	c := newCluster(t, 1)
	reg := prometheus.NewRegistry()
	p := alarmPipeline(c.ListenAddrs(), "",
		pipeline.InfluxSink{URL: "http://127.0.0.1:1", Bucket: "plant"},
		pipeline.InfluxSink{URL: "http://127.0.0.2:1", Bucket: "plant"})
	w, err := pipeline.NewWorker(context.Background(), p, pipeline.WithWorkerID("plant-1"), pipeline.WithMetrics(reg), pipeline.WithLogger(testLogger(t)))
	require.NoError(t, err)
	defer w.Close()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sinks := map[string]string{}
	for _, mf := range mfs {
		if mf.GetName() != "tflo_influx_points_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			sinks[labels["sink"]] = labels["bucket"]
		}
	}
	require.Equal(t, map[string]string{"0": "plant", "1": "plant"}, sinks)
}
