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
// twice, identical; the test counts those). Then the edge's state is
// compared with the crash-free run's through the restore path: each edge,
// restarted on its state folder, gets the same probe (every sensor far
// above the band, then twice far below), whose signals carry the mean of
// each sensor's restored SMA window and depend on its restored
// hysteresis mode; both must give the same signals. The seed is logged;
// set TFLO_CHAOS_SEED to replay one.
//
// TestPortalFaults: the iot-portal's central workers as docker-compose
// runs them (two processes; the shared checkpoint store, state.durable.s3,
// and the archive on one S3 server, versitygw; their presence leases in a
// coordination store, an in-process JetStream nats-server on a fixed port
// and folder; kfake, a real influxd, the Temporal dev server whose
// checkpoint coordinator runs their rounds; both processes also run
// tflo's workflows), in this order:
//
//   - SIGKILL of a central worker at a seeded random point, twice in the
//     short run, five times under TFLO_CHAOS_LONG=1 (make chaos). The
//     victim stays dead until the coordinator's per-shard table (its
//     "shards" query) shows every one of its shards checkpointed on the
//     survivor, which must happen within the session timeout + 2
//     checkpoint intervals of the kill (issue 16 item 2; the test sets a
//     3s session timeout and 1s interval: 5s). The long run asserts that
//     bound; the short run, which shares the machine with every other
//     package, only logs a takeover over it plus one interval (for
//     observing it through the query), with the group's requests and the
//     survivor's log, and fails only when none happens within a minute.
//     Then the victim is restarted.
//   - SIGKILL of a central worker during its group join (issue 16 item
//     3): a worker is killed, restarted, and killed again the moment its
//     JoinGroup reaches the broker (kfake's control hook), then restarted
//     at once; both workers should checkpoint shards again within the
//     rebalance timeout (12s) + the lease TTL + 2 intervals of that kill
//     (5–7s in 9 of 12 runs, all those since a kill waits for a stable
//     group); the test asserts 10s more (24s in the other 3: on kfake the
//     survivor's JoinGroup then waited out franz-go's request timeout,
//     see joinBoundKfake).
//   - the Temporal dev server stopped (SIGKILL) for 10s and restarted on
//     its database: the workers checkpoint on their own meanwhile, then a
//     round checkpoints every shard again.
//   - influxd stopped for 20s while records arrive.
//   - the S3 server stopped (SIGKILL) for 20s and restarted on its port
//     and folder: rounds fail meanwhile (at least one must, and the
//     checkpoints column says how many and whether the coordinator's
//     breaker opened; the test sets its cool-down to 10s, the shipped
//     default is a minute, which bounds the recovery after an outage
//     long enough to open it), then a round checkpoints every shard.
//   - the coordination store cut for 2 lease TTLs (the test sets a 3s
//     TTL: shut down 6s, restarted on the same port and store): rounds
//     must go on meanwhile (the leases are not on the checkpoint path),
//     each worker's /readyz must say its leases expired, both must be
//     ready again after the restart and neither may have stopped itself.
//
// After each fault committed lag returns to 0 (the table's recovery
// seconds, from the kill or the server's restart), every InfluxDB point
// of the crash-free run due by then is there with the same value, and the
// archive read by the independent reader (connectors/parquet/archivetest,
// arrow-go) holds no row twice. At the end InfluxDB and the archive equal
// the crash-free run's (one worker, same S3 server, no faults): 0
// missing, 0 differing, 0 extra. It logs the fault table (fault, at,
// takeover, recovery, missing, differing, duplicate, checkpoints).
//
// Every kill waits first for the coordinator's table to show shards on
// every worker and for a stable consumer group with every worker in it.
//
// `make test` runs each test once (the short run: the package took about
// 170s a run with -race on a 2-core machine shared with other work, the
// edge test 41–49s of it); `make chaos` runs the
// long one (TFLO_CHAOS_LONG=1) repeatedly with fresh seeds (CHAOS_COUNT,
// default 5). Not covered yet (issue 16 item 9): a kill of central during
// a restore in this topology; a central worker left dead after a kill
// during its join (pipeline's TestKillDuringJoinTakeoverBound covers it
// in process); a worker started while the coordination store is down
// (internal/worker's TestWorkerWaitsForTheCoordinationStore covers it in
// process).
//
// The tests build the worker binary once per run (go build, about a
// minute cold).
package chaos
