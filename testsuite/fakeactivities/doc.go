// Package fakeactivities registers stand-ins for tflo's activities on a
// real Temporal worker, under the names the workflows call, so workflow
// and CLI tests can run against a real dev server without shard state,
// archives or sinks. The stand-ins return plausible, deterministic values.
//
// Concurrency: a Stages value is safe for concurrent use.
package fakeactivities
