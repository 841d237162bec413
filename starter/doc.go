// Command starter is the tflo CLI: it runs the iot-portal demo and drives
// pipelines, checkpoints and backfills on any Temporal (a dev server, a
// cluster or a cloud namespace).
//
//	starter demo                      the whole iot-portal on this machine
//	starter pipeline start|stop|status
//	starter checkpoint now|list
//	starter backfill start|status|cancel
//	starter workers [--all]           each worker's lease: alive, stopped or dead
//	starter operators [TYPE...]       the operator types a spec's graph can use
//
// Every command takes --address, --namespace, TLS and API-key flags (or
// the TEMPORAL_* environment variables) and --json for scripts. Exit codes:
// 0 success, 1 failure, 2 bad usage, 3 not found.
package main
