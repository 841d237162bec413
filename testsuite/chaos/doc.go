// Package chaos runs tflo's shipped workers as separate processes — the
// worker binary built from workers/cmd/worker with the shipped pipeline
// specs — against real brokers, kills them with SIGKILL at seeded random
// points, and compares what they produced with a crash-free run of the
// same binary over the same input.
//
// TestEdgeSIGKILLExactlyOnce: the iot-portal edge (MQTT QoS 2 → keyed
// graph → signals on Kafka, kfake in process) is killed three times while
// a QoS 2 publisher runs, on mochi-mqtt (in process) and on Mosquitto
// (Debian's, skipped when absent unless TFLO_REQUIRE_SERVICES=1). Every
// reading must be applied exactly once: the distinct signals on Kafka
// equal the crash-free run's, none differs and none is missing (the Kafka
// sink is at-least-once, so a signal replayed after a kill may appear
// twice, identical; the test counts those). The seed is logged; set
// TFLO_CHAOS_SEED to replay one.
//
// TestPortalFaults: the iot-portal's central workers (two processes
// sharing a durable folder and a file:// archive, kfake, a real influxd,
// the Temporal dev server whose checkpoint coordinator runs their rounds;
// both processes also run tflo's workflows), in this order:
//
//   - SIGKILL of a central worker at a seeded random point, twice in the
//     short run, five times under TFLO_CHAOS_LONG=1 (make chaos). The
//     victim stays dead until the coordinator's per-shard table (its
//     "shards" query) shows every one of its shards checkpointed on the
//     survivor, which must happen within the session timeout + 2
//     checkpoint intervals of the kill (issue 16 item 2; the test sets a
//     3s session timeout and 1s interval: 5s; the short run, which shares
//     the machine with every other package, allows one more interval for
//     observing it through the query); then it is restarted.
//   - the Temporal dev server stopped (SIGKILL) for 10s and restarted on
//     its database: the workers checkpoint on their own meanwhile, then a
//     round checkpoints every shard again.
//   - influxd stopped for 20s while records arrive.
//
// After each fault committed lag returns to 0 (the table's recovery
// seconds), every InfluxDB point of the crash-free run due by then is
// there with the same value, and the archive read by the independent
// reader (connectors/parquet/archivetest, arrow-go) holds no row twice.
// At the end InfluxDB and the archive equal the crash-free run's: 0
// missing, 0 differing, 0 extra. It logs the fault table (fault, at,
// takeover, recovery, missing, differing, duplicate).
//
// `make test` runs each test once (the short run: the package took 113 s
// on a 2-core machine, the worker build included); `make chaos` runs the long one (TFLO_CHAOS_LONG=1)
// repeatedly with fresh seeds (CHAOS_COUNT, default 5). Not covered yet
// (issue 16 item 9): a kill of central during a restore or a group join
// in this topology (pipeline's TestKillDuringJoinTakeoverBound covers the
// join), the S3 state store's server stopped, the coordination store
// (NATS) cut.
//
// The tests build the worker binary once per run (go build, about a
// minute cold).
package chaos
