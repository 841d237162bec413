// Package toolbin finds the server binaries the Makefile builds into the
// repository's bin folder (temporal, influxd, versitygw) for tests, and
// builds tflo's own programs for tests that run them as a user does
// (GoBuild).
//
// Lookup: the environment variable named by the caller (for example
// $TFLO_TEMPORAL), else <repo>/bin/<name>. A missing binary skips the test
// with a message saying `make tools` builds it — unless
// TFLO_REQUIRE_SERVICES=1 (set by `make test`), which makes it a failure,
// so CI can never pass by skipping.
package toolbin
