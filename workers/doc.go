// Package workers holds tflo's worker programs and example pipelines:
//
//   - workers/cmd/worker: the one pipeline worker; it runs any pipeline
//     spec (worker --pipeline FILE.yaml).
//   - workers/worker: the same worker as a library (Main), for a worker
//     binary of your own whose specs name operators you register;
//     workers/examples/anomaly is one (a zscore operator and its spec).
//   - workers/pipelines: the example specs (iot-portal's edge and central
//     pipelines, the SMA-over-readings job, market data) and the tests that
//     pin what they compute.
//   - workers/simulator (and workers/cmd/simulator): a seeded sensor
//     fleet publishing to MQTT, the input of the iot-portal.
//
// `starter demo` runs the iot-portal in one process (internal/portal);
// docker-compose.yml runs the same specs in the worker image against real
// services.
package workers
