// Package version says which build of tflo is running: the version
// stamped at link time (make build sets Version from `git describe`), else
// the main module's version Go records in the binary, plus the Go version
// and the VCS revision.
//
// Every binary shows it the same way: `starter version` and `--version`
// on starter and the worker commands (Line), and the tflo_build_info
// gauge on every worker's /metrics (Collector), whose labels version,
// go_version and revision let an operator see which build each worker
// runs.
//
// Main types: Info (what Get returns). Concurrency: Get reads immutable
// build information and is safe from any goroutine; Version is written
// only by the linker.
package version
