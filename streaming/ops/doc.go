// Package ops is tflo's catalog of general-purpose signal operators for
// sensor data, and the template for writing your own catalog package.
//
// # Operators
//
//   - [SMA]: simple moving average over N values, O(1) per event.
//   - [EMA]: exponential moving average with period N, SMA-seeded.
//   - [Hysteresis]: two thresholds → a [High]/[Low] mode without chatter.
//   - [ThresholdCross]: confirmed [Up]/[Down] crossings, optional dwell.
//   - [Deadband]: report-by-exception, emits only changes larger than a band.
//   - [RateOfChange]: slope per event-time unit (or per [Per] unit).
//   - [RollingMin] / [RollingMax]: extreme of the last N values,
//     monotonic deque, O(1) amortised.
//   - [MedianDespike]: replaces values far from the window median.
//   - [Episode]: turns a mode (a Hysteresis output) into opened/closed
//     episodes with their duration.
//
// [Register] declares them all in a streaming.Registry under their type
// names ("sma", "ema", "hysteresis", "threshold_cross", "deadband",
// "rate_of_change", "rolling_min", "rolling_max", "median_despike",
// "episode"), with their parameters, defaults, bounds and docs, so a
// pipeline spec can name them; [Types] returns the declarations.
//
// Each type's doc states its output, its warm-up (what it emits before its
// window fills: by default nothing; windowed operators take a
// streaming.Warmup policy through WithWarmup, or the "warmup" parameter of
// a spec, to emit over the partial window instead) and which inputs it
// refuses: NaN and ±Inf always, and for operators that add values up,
// magnitudes that could overflow their sums (beyond MaxFloat64/(2N) for an
// SMA of N). A refused input leaves the state unchanged and Eval returns
// streaming.Rejected(), which the runtime counts; never a panic, and never
// a NaN or ±Inf in the state or the output. Constructors panic
// on impossible parameters (a window of 0, low ≥ high), like
// time.NewTicker; Builder.Build calls every factory once, so such a mistake
// surfaces when the graph is built, not on the first record of a key.
// Through the registry the same mistakes are errors naming the parameter.
//
// # Writing a catalog package
//
// A catalog is an ordinary Go package of types implementing
// [streaming.Operator]; this package is the pattern to copy:
//
//  1. One file per operator. The type embeds [streaming.Base] (or
//     [streaming.StatelessBase] for operators with no state, which the
//     runtime then skips when saving) and pins its contracts:
//     var _ streaming.Operator = (*T)(nil), and streaming.Arity so
//     Builder.Build rejects a node wired with the wrong number of inputs.
//  2. Name returns a stable type name ("sma"): it is written into every
//     state blob next to the node name, so renaming it orphans saved
//     state. Eval reads its inputs with Computed.Float64 (or Mode, Truth,
//     Int64), returns streaming.Float / Sig / Bool / Int,
//     streaming.NoOutput() when it has nothing to say (warm-up, no
//     event), or streaming.Rejected() when it refuses the input (NaN,
//     ±Inf, or a value that would make its state non-finite: bound the
//     magnitude, as SMA does with MaxFloat64/(2N) so no window sum can
//     overflow, or compute the new state into locals and keep it only if
//     it is finite). The runtime skips downstream nodes that lost an
//     input, so NoOutput propagates naturally.
//  3. The per-event path must not allocate: preallocate buffers in the
//     constructor, keep state in fixed-size fields and rings, and return
//     Computed by value. Add a benchmark with b.ReportAllocs per operator
//     (see bench_test.go) and keep it at 0 allocs/op.
//  4. Save writes a compact binary blob with encoding/binary, starting
//     with the operator's configuration (window, thresholds), so Load can
//     refuse state saved by a differently configured node instead of
//     misreading it. Load decodes into locals, validates (sizes bounded,
//     floats finite, no trailing bytes) and commits only on success; a bad
//     blob returns a *streaming.OperatorLoadError (wrapping
//     streaming.ErrCorrupt for undecodable bytes). Fuzz Load.
//  5. TypeVersion starts at 1. When the Save format changes, bump it and
//     implement [streaming.Migrator] to convert older blobs ([SMA] goes
//     from version 1 to 2 this way). Without a migrator the runtime refuses
//     an old blob with a *streaming.VersionError — state is never silently
//     reset.
//  6. Document, on the type, the output, the warm-up, NaN/±Inf handling
//     and the state format; define the [streaming.Mode] constants the
//     operator emits in one place (modes.go).
//  7. Declare the type for the registry (register.go): its parameters
//     with kinds, defaults, bounds and one-sentence docs, inputs, output,
//     mode names and TypeVersion. New refuses every parameter value the
//     constructor would panic on, naming the parameter, so a spec's
//     mistake is an error and never a panic.
//  8. Test with table tests whose expected values are computed
//     independently (by hand, or by a from-scratch reference formula that
//     cites its published definition), a mid-stream Save/Load round trip
//     that must continue exactly like an uninterrupted run, and a version
//     test through streaming.Instance.Load.
//
// Example_customOperator in example_test.go shows a complete small
// operator.
//
// # Concurrency
//
// Operators are not safe for concurrent use. The runtime creates one value
// per key (through the factory given to streaming.Builder.Node) and calls
// it from the key's owning goroutine only.
package ops
