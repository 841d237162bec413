// Package temporaltest starts a real Temporal dev server (the pinned
// `temporal` CLI in ./bin, built by `make tools`) for integration tests,
// on loopback, with tflo's search attributes registered.
//
// Concurrency: Start is safe to call from parallel tests; each call starts
// its own server (about 2 s), stopped when the test ends.
package temporaltest
