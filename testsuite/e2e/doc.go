// Package e2e holds the end-to-end tests of the example pipelines
// (workers/pipelines):
//
//   - the iot-portal: the demo's topology (internal/portal.Stack over
//     internal/devstack's embedded Kafka, MQTT, Temporal dev server and
//     influxd) for a bounded, deterministic run, checked against the
//     recorded outputs, InfluxDB, the Parquet archive, the dead-letter
//     topic, Temporal's visibility API and a backfill;
//   - market data (TestMarketData): the market-data spec over a seeded
//     market, restarted midway, every output on Kafka, in InfluxDB and in
//     the archive compared with indicators computed in the test;
//   - the SMA job (TestSMAJobFromSpec): the worker main on the
//     sma-readings spec, no Go code of the job's own.
//
// The iot-portal test needs bin/temporal and bin/influxd, the market-data
// test bin/influxd (`make tools`); without them they skip, or fail under
// TFLO_REQUIRE_SERVICES=1 as in `make test`.
package e2e
