// Package worker is what the worker binaries share: the main framework
// (Main, RunMain: flags, --version, --print-config, --pprof, the config
// file read strictly with overrides by internal/envconfig's rule under the
// main's prefix — TFLO, the simulator's TFLO_SIMULATOR — where a variable
// naming no key is an error, the metrics server with /metrics (and
// tflo_build_info), /healthz and /readyz, slog, graceful shutdown on
// SIGINT/SIGTERM) and the pipeline worker, workers/cmd/worker, which runs
// any pipeline spec. `--help` lists every key with its variable, type,
// default and description; the descriptions are the fields' doc comments,
// generated into keydocs.go by TestKeyDocsUpToDate.
//
// # Main types
//
//   - [Main] / [RunMain]: a main's description and its runner; [Runtime]
//     is what RunMain hands the main's Run (logger, registry, and the
//     [Readiness] /readyz asks).
//   - [ServeMetrics]: the metrics server ([WithReadiness], [WithPprof]).
//   - [PipelineConfig]: a pipeline worker's deployment (worker id,
//     Temporal as internal/temporalclient reads it, coordination store,
//     backfills, metrics, logs); the pipeline itself is its spec
//     ([PipelineMain]: worker --pipeline FILE.yaml).
//   - [RunPipeline]: connects what the config names and runs a
//     pipeline.Worker.
//   - [BackfillWorker]: the backfill workflow's activities for one
//     pipeline, replaying file:// and s3:// archives into InfluxDB through
//     the pipeline's own Output → point mapping (influx.OutputSink), or
//     into a Kafka topic keyed by sensor ([ReplayedSignals]); [ParseSink]
//     checks a backfill's sink name.
//
// Nothing here links the embedded dev stack (kfake, mochi): production
// binaries import this package, `starter demo` and the tests add the
// stack (internal/portal).
//
// # Concurrency
//
// RunMain and RunPipeline block until the worker stopped; a
// BackfillWorker is started once and closed once.
package worker
