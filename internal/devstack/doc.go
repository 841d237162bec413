// Package devstack starts the embedded services of the iot-portal on one
// machine, without a testing.T, for `starter demo` and the tests:
//
//   - [StartKafka]: an in-process Kafka-protocol cluster (kfake) on
//     loopback, with the topics seeded.
//   - [StartMQTT]: an in-process MQTT v5 broker (testsuite/mqttbroker).
//   - [StartTemporal]: the pinned Temporal dev server (bin/temporal, built
//     by `make tools`) with its web UI and tflo's search attributes,
//     waited on until the frontend answers.
//   - [StartInflux]: the pinned influxd 1.8 (bin/influxd) with a generated
//     config on loopback, waited on until /ping answers.
//   - [StartS3]: an in-process S3-compatible server (gofakes3, objects in
//     memory) on loopback, with the buckets created: the demo's archive.
//
// Every service has a Close that stops it and waits for it to exit; Close
// is idempotent. Binaries are found by [Binary]: an environment variable
// ($TFLO_TEMPORAL, $TFLO_INFLUXD), else <repo>/bin/<name>, else $PATH.
//
// Concurrency: the Start functions may run concurrently; every exported
// method of a service is safe for concurrent use. Child processes are
// started by one goroutine locked to its OS thread for the life of the
// process: a child is killed when the thread that started it exits
// (Pdeathsig), and that thread does not.
package devstack
