package worker

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/internal/archiveloc"
	"github.com/tflo-io/tflo/internal/tlsconfig"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/influxtest"
	"github.com/tflo-io/tflo/testsuite/s3test"
	"github.com/tflo-io/tflo/testsuite/tlstest"
)

// TestBackfillAllowlists is issue 17.10: the backfill activity trusted its
// input — it opened (and created) any file:// path and created any
// InfluxDB database with the worker's credentials. Outside the allowlists
// a location or database is refused, naming it and the allowlist, before
// anything is created.
func TestBackfillAllowlists(t *testing.T) {
	var queries atomic.Int32
	influxSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { queries.Add(1) }))
	defer influxSrv.Close()
	base := t.TempDir()
	root := filepath.Join(base, "archive")
	b := &BackfillWorker{URL: influxSrv.URL, ArchiveRoots: []string{"file://" + root}, DatabasePrefixes: []string{"replay_"}}
	archives, err := b.archives()
	require.NoError(t, err)

	_, _, err = archives("file://" + root + "/2026")
	require.ErrorIs(t, err, archiveloc.ErrNotFound, "allowed, but a backfill reads: a missing folder is not created")
	require.NoError(t, os.MkdirAll(filepath.Join(root, "2026"), 0o755))
	_, _, err = archives("file://" + root + "/2026")
	require.NoError(t, err)
	for _, loc := range []string{"file://" + filepath.Join(base, "elsewhere"), "file://" + root + "/../escaped", "s3://bucket/prod"} {
		_, _, err := archives(loc)
		require.ErrorContains(t, err, "is not allowed: it is under none of backfill.archive_roots [file://"+root+"]", loc)
	}
	for _, dir := range []string{"elsewhere", "escaped"} {
		_, err := os.Stat(filepath.Join(base, dir))
		require.ErrorIs(t, err, os.ErrNotExist, "a refused folder is not created")
	}

	_, err = b.sink(InfluxSinkName("prod/autogen"))
	require.EqualError(t, err, `sink influx:prod/autogen: influx database "prod" is not allowed: it starts with none of backfill.database_prefixes ["replay_"]`)
	require.Zero(t, queries.Load(), "no CREATE DATABASE for a refused database")
	_, err = b.sink(InfluxSinkName("replay_june/autogen"))
	require.NoError(t, err)
	require.Equal(t, int32(1), queries.Load(), "an allowed database is created")
	b.Close(t.Context())

	bad := &BackfillWorker{ArchiveRoots: []string{"/no/scheme"}}
	_, err = bad.archives()
	require.ErrorContains(t, err, "backfill.archive_roots: archive location \"/no/scheme\": no scheme")
}

// TestBackfillAllowlistDefaults: without allowlists in the worker config,
// a backfill may read the pipeline's own archive folders and write to
// databases named after its influx sinks' databases, and nothing else.
func TestBackfillAllowlistDefaults(t *testing.T) {
	p := pipeline.Pipeline{Sinks: []pipeline.SinkSpec{
		pipeline.ArchiveSink{Dir: "/var/lib/tflo/archive/"},
		&pipeline.InfluxSink{URL: "http://influx:8086", Bucket: "iot_portal/autogen"},
		pipeline.KafkaSink{Topic: "signals"},
	}}
	roots, prefixes := BackfillConfig{}.allowlists(p)
	require.Equal(t, []string{"file:///var/lib/tflo/archive"}, roots)
	require.Equal(t, []string{"iot_portal"}, prefixes)

	roots, prefixes = BackfillConfig{ArchiveRoots: []string{"s3://tflo/prod"}, DatabasePrefixes: []string{"replay_"}}.allowlists(p)
	require.Equal(t, []string{"s3://tflo/prod"}, roots)
	require.Equal(t, []string{"replay_"}, prefixes)

	roots, prefixes = BackfillConfig{}.allowlists(pipeline.Pipeline{})
	require.NotNil(t, roots, "no default: everything refused, not everything allowed")
	require.Empty(t, roots)
	require.NotNil(t, prefixes)
	require.Empty(t, prefixes)

	c := PipelineConfig{Backfill: BackfillConfig{ArchiveRoots: []string{"ftp://x"}, DatabasePrefixes: []string{""}}}
	c.ApplyDefaults()
	err := c.Validate()
	require.ErrorContains(t, err, `backfill.archive_roots: archive location "ftp://x": unsupported scheme "ftp"`)
	require.ErrorContains(t, err, "backfill.database_prefixes: an empty prefix would allow every database")
}

// TestBackfillKafkaSecurity: a backfill's kafka: sink published without
// the pipeline's TLS and SASL, so a backfill to a SASL-only cluster
// failed; it uses KafkaSecurity (the pipeline source's) now.
func TestBackfillKafkaSecurity(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "signals.replay"),
		kfake.EnableSASL(), kfake.Superuser(kafka.MechanismPlain, "svc", "pw"))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	open := &BackfillWorker{Brokers: c.ListenAddrs()}
	_, err = open.sink(KafkaSinkName("signals.replay"))
	require.ErrorContains(t, err, "is SASL missing?")

	b := &BackfillWorker{Brokers: c.ListenAddrs(), KafkaSecurity: kafka.Security{SASL: &kafka.SASLConfig{Mechanism: kafka.MechanismPlain, Username: "svc", Password: "pw"}}}
	_, err = b.sink(KafkaSinkName("signals.replay"))
	require.NoError(t, err)
	b.Close(t.Context())
}

// TestBackfillInfluxPrivateCA: the backfill's InfluxDB (database creation
// and writes) took no custom CA; backfill.influx_tls reaches an InfluxDB
// behind a private CA requiring client certificates.
func TestBackfillInfluxPrivateCA(t *testing.T) {
	pki := tlstest.New(t)
	influx := influxtest.Start(t)
	target, err := url.Parse(influx.URL)
	require.NoError(t, err)
	srv := pki.Serve(t, httputil.NewSingleHostReverseProxy(target))

	cfg := PipelineConfig{Backfill: BackfillConfig{InfluxURL: srv.URL,
		InfluxTLS: &tlsconfig.Config{CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}}}
	tc, err := cfg.Backfill.InfluxTLS.Build()
	require.NoError(t, err)
	b := &BackfillWorker{URL: srv.URL, InfluxTLS: tc}
	s, err := b.sink(InfluxSinkName("replay_tls/autogen"))
	require.NoError(t, err)
	ctx := t.Context()
	require.NoError(t, s.Write(ctx, []streaming.Output{{Key: "s-1", Name: "mean", TS: time.Now().UnixNano(), Value: 21}}))
	require.NoError(t, s.Flush(ctx, "", 0))
	require.Equal(t, 1, influx.Count(t, "replay_tls", "mean"))
	b.Close(ctx)

	_, err = (&BackfillWorker{URL: srv.URL}).sink(InfluxSinkName("replay_plain/autogen"))
	require.ErrorContains(t, err, "certificate", "without the CA the server is not trusted")
}

// TestBackfillReadsThePipelinesArchiveAsItsSinkWrites: a pipeline's
// archive sink on an S3-compatible server gives its endpoint and keys in
// the spec (sinks[].archive.s3). Bug: a backfill of that archive read it
// only as the TFLO_S3_* variables say, so without them it went to AWS,
// and with other ones it was refused. Now a location within the sink's
// root is read with the sink's settings; others still as TFLO_S3_* say.
func TestBackfillReadsThePipelinesArchiveAsItsSinkWrites(t *testing.T) {
	srv := s3test.Start(t, "archive")
	settings := srv.Settings(t)
	ctx := t.Context()
	loc, err := archiveloc.Parse("s3://archive/prod")
	require.NoError(t, err)
	arc, err := archiveloc.Open(ctx, loc, settings)
	require.NoError(t, err)
	require.NoError(t, arc.PutAtomic(ctx, "x/file.parquet", []byte("rows")))

	p := pipeline.Pipeline{Sinks: []pipeline.SinkSpec{
		pipeline.ArchiveSink{Location: "s3://archive/prod", S3: settings},
		&pipeline.ArchiveSink{Dir: "/var/lib/tflo/archive"},
	}}
	require.Equal(t, map[string]archiveloc.S3{"s3://archive/prod": settings}, archiveSinkS3(p))

	// TFLO_S3_* name the same server with a wrong secret.
	t.Setenv("TFLO_TEST_WRONG_SECRET", "wrong")
	env := settings
	env.SecretKeyEnv = "TFLO_TEST_WRONG_SECRET"
	b := &BackfillWorker{S3: env, SinkS3: archiveSinkS3(p)}
	archives, err := b.archives()
	require.NoError(t, err)
	own, _, err := archives("s3://archive/prod")
	require.NoError(t, err)
	objs, err := own.List(ctx, "")
	require.NoError(t, err, "the pipeline's archive read with its sink's settings")
	require.Len(t, objs, 1)

	other, _, err := archives("s3://archive/other")
	require.NoError(t, err)
	_, err = other.List(ctx, "")
	require.Error(t, err, "another location is read as TFLO_S3_* say (here: a wrong secret)")
}
