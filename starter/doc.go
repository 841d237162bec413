// Package starter is the tflo CLI: `starter demo`, `starter pipeline ...`,
// `starter checkpoint ...` and `starter backfill ...` against any Temporal
// address.
//
// Status: not built yet (see the iot-portal issue).
package starter
