package pipeline_test

import (
	"context"
	"fmt"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/testsuite/influxtest"
	"github.com/tflo-io/tflo/testsuite/mqttbroker"
	"github.com/tflo-io/tflo/testsuite/mqttbroker/mqttbrokertest"
	"github.com/tflo-io/tflo/testsuite/tlstest"
)

// TestPrivateCAFromTheSpec is issue 17.10: Influx, S3 and MQTT accepted no
// custom CA through config, so servers signed by a private CA (and
// requiring client certificates) could not be used. A spec's tls sections
// (ca_file, cert_file, key_file) reach all three: readings arrive over
// MQTT/TLS, points land in InfluxDB behind TLS and the checkpoint in an S3
// bucket behind TLS.
func TestPrivateCAFromTheSpec(t *testing.T) {
	pki := tlstest.New(t)

	b := mqttbrokertest.Start(t, mqttbroker.Options{TLS: pki.ServerConfig()})
	broker, brokerAddr := b.Server(), b.Addr()

	influx := influxtest.Start(t)
	influx.CreateDatabase(t, "plant")
	target, err := url.Parse(influx.URL)
	require.NoError(t, err)
	influxTLS := pki.Serve(t, httputil.NewSingleHostReverseProxy(target))

	backend := s3mem.New()
	require.NoError(t, backend.CreateBucket("checkpoints"))
	s3TLS := pki.Serve(t, gofakes3.New(backend).Server())
	t.Setenv("TFLO_TEST_S3_KEY", "AKIDTLS")
	t.Setenv("TFLO_TEST_S3_SECRET", "tls-secret")

	tlsSection := fmt.Sprintf("{ca_file: %q, cert_file: %q, key_file: %q}", pki.CAFile, pki.ClientCertFile, pki.ClientKeyFile)
	spec := fmt.Sprintf(`name: tls-plant
source:
  mqtt:
    servers: [tls://%s]
    topics: [sensors/#]
    client_id: tls-gw
    dead_letter_topic: dlq/sensors
    omit_receive_maximum: true
    tls: %[2]s
graph:
  inputs: [value]
  nodes: [{name: mean, type: sma, inputs: [value], params: {window: 2, warmup: partial}}]
sinks:
  - influx: {url: %[3]q, bucket: plant/autogen, tls: %[2]s}
state:
  memory: 96MiB
  durable:
    s3: {bucket: checkpoints, endpoint: %[4]q, region: us-east-1, access_key_env: TFLO_TEST_S3_KEY, secret_key_env: TFLO_TEST_S3_SECRET, tls: %[2]s}
checkpoint: {interval: 1h}
`, brokerAddr, tlsSection, influxTLS.URL, s3TLS.URL)
	p, err := pipeline.Parse([]byte(spec))
	require.NoError(t, err)

	g := start(t, p, pipeline.WithWorkerID("tls-gw"))
	require.Eventually(t, func() bool { return g.w.Stats().Subscribed }, waitFor, time.Millisecond)
	for i := range 3 {
		require.NoError(t, broker.Publish("sensors/boiler", mqtt.EncodeReading(nil, mqtt.Reading{Sensor: "boiler", TS: time.Now().UnixMilli() + int64(i), Value: 20}), false, 2))
	}
	require.Eventually(t, func() bool { return g.w.Stats().RecordsIn == 3 }, waitFor, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, g.w.Checkpoint(ctx), "the checkpoint goes to S3 over TLS and flushes the Influx sink over TLS")
	require.Equal(t, 3, influx.Count(t, "plant", "mean"))
	objs, err := backend.ListBucket("checkpoints", nil, gofakes3.ListBucketPage{})
	require.NoError(t, err)
	require.NotEmpty(t, objs.Contents, "checkpoint objects in the bucket")
	g.stop(t)

	// A CA file that is not there is named when the sink opens.
	bad := strings.Replace(spec, fmt.Sprintf("sinks:\n  - influx: {url: %q, bucket: plant/autogen, tls: %s}", influxTLS.URL, tlsSection),
		fmt.Sprintf("sinks:\n  - influx: {url: %q, bucket: plant/autogen, tls: {ca_file: /nonexistent/ca.pem}}", influxTLS.URL), 1)
	require.NotEqual(t, spec, bad)
	p, err = pipeline.Parse([]byte(bad))
	require.NoError(t, err)
	_, err = pipeline.NewWorker(ctx, p, pipeline.WithLogger(testLogger(t)))
	require.ErrorContains(t, err, `ca_file "/nonexistent/ca.pem": no such file or directory`)
}

// TestKafkaSASLFromTheSpec is issue 17.10: the spec took the SASL password
// itself (source.kafka.security.sasl.password, in the YAML file); it now
// names the variable holding it (password_env), and a password in the
// file is refused. The Kafka sink and the dead letters use the source's
// security: records flow in and out of a SASL-only cluster.
func TestKafkaSASLFromTheSpec(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, topic, topic+".dlq", "readings.sma"),
		kfake.EnableSASL(), kfake.Superuser(kafka.MechanismScramSHA256, "svc", "pw-from-env"),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()
	t.Setenv("TFLO_TEST_KAFKA_PW", "pw-from-env")
	spec := fmt.Sprintf(`name: sasl
source:
  kafka:
    brokers: [%s]
    topic: readings
    session_timeout: 10s
    security: {sasl: {mechanism: SCRAM-SHA-256, username: svc, password_env: TFLO_TEST_KAFKA_PW}}
graph:
  inputs: [value]
  nodes: [{name: sma, type: sma, inputs: [value], params: {window: 2, warmup: partial}}]
sinks:
  - kafka: {topic: readings.sma}
state: {memory: 96MiB}
checkpoint: {interval: 1h}
`, strings.Join(addrs, ","))
	p, err := pipeline.Parse([]byte(spec))
	require.NoError(t, err)

	opts := []kgo.Opt{kgo.SeedBrokers(addrs...), kgo.SASL(scram.Auth{User: "svc", Pass: "pw-from-env"}.AsSha256Mechanism())}
	prod, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic(topic))...)
	require.NoError(t, err)
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, prod.ProduceSync(ctx,
		&kgo.Record{Key: []byte("s-1"), Value: fmt.Appendf(nil, `{"sensor":"s-1","ts":%d,"value":20}`, time.Now().UnixMilli())},
		&kgo.Record{Key: []byte("s-1"), Value: []byte("not json")}).FirstErr())

	w := start(t, p)
	require.Eventually(t, func() bool { return w.w.Stats().RecordsIn == 1 && w.w.Stats().DeadLettered == 1 }, waitFor, time.Millisecond)
	require.NoError(t, w.w.Checkpoint(ctx))
	cons, err := kgo.NewClient(append(opts, kgo.ConsumeTopics("readings.sma", topic+".dlq"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	require.NoError(t, err)
	defer cons.Close()
	got := map[string]int{}
	for got["readings.sma"] < 1 || got[topic+".dlq"] < 1 {
		fs := cons.PollFetches(ctx)
		require.NoError(t, ctx.Err(), "records read: %v", got)
		fs.EachRecord(func(r *kgo.Record) { got[r.Topic]++ })
	}
	w.stop(t)

	_, err = pipeline.Parse([]byte(strings.Replace(spec, "password_env: TFLO_TEST_KAFKA_PW", "password: pw-in-the-file", 1)))
	require.ErrorContains(t, err, "source.kafka.security.sasl.password: unknown key (known here: mechanism, username, password_env)")
	t.Setenv("TFLO_TEST_KAFKA_PW", "")
	_, err = pipeline.Parse([]byte(spec))
	require.ErrorContains(t, err, "SASL password variable TFLO_TEST_KAFKA_PW (password_env of user \"svc\") is unset or empty")
}
