// Package e2e holds the end-to-end test of the iot-portal: the demo's
// topology (internal/portal.Stack over internal/devstack's embedded
// Kafka, MQTT, Temporal dev server and influxd) for a bounded,
// deterministic run, checked against reference computations of the edge
// and central graphs, InfluxDB, the Parquet archive, the dead-letter
// topic, Temporal's visibility API and a backfill. It needs bin/temporal
// and bin/influxd (`make tools`); without them it skips, or fails under
// TFLO_REQUIRE_SERVICES=1 as in `make test`.
package e2e
