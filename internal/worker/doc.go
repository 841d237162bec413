// Package worker is what the worker binaries share: the main framework
// (Main, RunMain: flags, the config file read strictly with TFLO_*
// overrides by internal/envconfig's rule, the /metrics endpoint, slog,
// graceful shutdown on SIGINT/SIGTERM) and the pipeline worker,
// workers/cmd/worker, which runs any pipeline spec.
//
// # Main types
//
//   - [Main] / [RunMain]: a main's description and its runner.
//   - [PipelineConfig]: a pipeline worker's deployment (worker id,
//     Temporal, coordination store, backfills, metrics, logs); the
//     pipeline itself is its spec ([PipelineMain]: worker --pipeline
//     FILE.yaml).
//   - [RunPipeline]: connects what the config names and runs a
//     pipeline.Worker.
//   - [BackfillWorker]: the backfill workflow's activities for one
//     pipeline, writing through the pipeline's own Output → point mapping.
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
