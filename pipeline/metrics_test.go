package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/testsuite/logtest"
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

// TestInfluxSinkWarnsOfAnUnsetToken: an influx sink whose token_env
// names a variable that is unset or empty wrote without credentials and
// said nothing (the server's refusals came later, per batch); it warns
// at start, naming the variable, and still opens (a server without
// authentication needs no token).
func TestInfluxSinkWarnsOfAnUnsetToken(t *testing.T) {
	for _, tc := range []struct {
		name  string
		token string
		warns int64
	}{{"unset", "", 1}, {"set", "user:secret", 0}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("TFLO_TEST_INFLUX_TOKEN", tc.token)
			warned := logtest.NewCounter("influx sink writes without credentials")
			s, err := pipeline.InfluxSink{URL: "http://127.0.0.1:1", Bucket: "plant", TokenEnv: "TFLO_TEST_INFLUX_TOKEN"}.
				OpenSink(context.Background(), pipeline.SinkEnv{Log: warned.Logger()})
			require.NoError(t, err)
			require.NoError(t, s.Close(context.Background()))
			require.Equal(t, tc.warns, warned.Lines())
		})
	}
}

// TestClosedWorkerLeavesTheRegistry: a closed worker's collectors (its
// own and its S3 store's) stayed registered, serving the closed worker's
// last values, and a new worker of the same pipeline on the registry (a
// restart in process) was refused as a duplicate; closing the worker
// unregisters them.
func TestClosedWorkerLeavesTheRegistry(t *testing.T) {
	c := newCluster(t, 1)
	s3 := s3test.Start(t, "ckpt")
	t.Setenv("LEAVE_S3_KEY", s3.AccessKey)
	t.Setenv("LEAVE_S3_SECRET", s3.SecretKey)
	reg := prometheus.NewRegistry()
	p := alarmPipeline(c.ListenAddrs(), "")
	p.State.Durable = pipeline.Durable{S3: &pipeline.S3Store{Bucket: "ckpt", Endpoint: s3.URL, Region: "us-east-1",
		AccessKeyEnv: "LEAVE_S3_KEY", SecretKeyEnv: "LEAVE_S3_SECRET"}}
	tflo := func() []string {
		mfs, err := reg.Gather()
		require.NoError(t, err)
		var names []string
		for _, mf := range mfs {
			if strings.HasPrefix(mf.GetName(), "tflo_") {
				names = append(names, mf.GetName())
			}
		}
		return names
	}

	r := start(t, p, pipeline.WithWorkerID("plant-1"), pipeline.WithMetrics(reg))
	r.waitFor(t, func() bool { return r.w.Stats().Owned == 1 }, 30*time.Second, "the worker owns the partition")
	require.Contains(t, tflo(), "tflo_pipeline_records_in_total")
	r.stop(t)
	require.Empty(t, tflo(), "collectors of the stopped worker")

	w, err := pipeline.NewWorker(context.Background(), p, pipeline.WithWorkerID("plant-1"), pipeline.WithMetrics(reg))
	require.NoError(t, err, "a new worker of the pipeline on the registry")
	require.Contains(t, tflo(), "tflo_pipeline_records_in_total")
	require.NoError(t, w.Close())
	require.Empty(t, tflo(), "collectors of the closed worker that never ran")
}

// TestDeadLetterMetricSaysWhatItCounts: tflo_pipeline_dlq_total's help
// said it counts records that failed to decode, but it counts every dead
// letter: records outside the limits and new keys over state.max_keys
// too (tflo_pipeline_keys_refused_total counts the latter alone).
func TestDeadLetterMetricSaysWhatItCounts(t *testing.T) {
	c := newCluster(t, 1)
	reg := prometheus.NewRegistry()
	w, err := pipeline.NewWorker(context.Background(), alarmPipeline(c.ListenAddrs(), ""), pipeline.WithWorkerID("plant-1"), pipeline.WithMetrics(reg))
	require.NoError(t, err)
	defer w.Close()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == "tflo_pipeline_dlq_total" {
			require.Contains(t, mf.GetHelp(), "outside the pipeline's limits")
			require.Contains(t, mf.GetHelp(), "state.max_keys")
			return
		}
	}
	t.Fatal("no tflo_pipeline_dlq_total")
}
