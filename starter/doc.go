// Command starter is the tflo CLI: it runs the iot-portal demo and drives
// pipelines, checkpoints and backfills on any Temporal (a dev server, a
// cluster or a cloud namespace).
//
//	starter demo                      the whole iot-portal on this machine
//	starter pipeline start|stop|status
//	starter checkpoint now|list
//	starter backfill start|status|cancel
//	starter archive ls|verify|compact  file:// folders and s3://bucket/prefix
//	starter workers [--all]           each worker's lease: alive, stopped or dead
//	starter operators [TYPE...]       the operator types a spec's graph can use
//	starter version                   which build this is (also --version)
//
// Every command reaches Temporal as the Temporal CLI does (internal/temporalclient:
// its flags, TEMPORAL_* variables and config-file profiles) and prints
// through one printer (-o table|json|yaml, --json; output.go). Errors are
// printed once, by execute, as "Error: <message>". Exit codes: 0 success
// (a listing that finds nothing included), 1 failure, 2 bad usage, 3 a
// named object missing, 130 interrupted.
//
// Adding a command: declare its Args if it takes positional arguments
// (finishTree makes every other command refuse them, and any argument
// error a usage error); print with app.emit(v, human) or
// app.emitTable(v, table); wait with waitFlags (--wait, --timeout);
// return usagef(...) for bad flags and notFoundError{...} for a named
// object that does not exist; mark a people-only command with the
// annotationTextOnly annotation.
package main
