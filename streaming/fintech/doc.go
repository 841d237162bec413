// Package fintech is tflo's catalog of market-data operators: [VWAP],
// [RSI] (Wilder smoothing), [Bollinger] bands, [MACD] with its signal line,
// and [MACrossover]. It follows the pattern of streaming/ops (see that
// package's doc for how to write a catalog). [Register] declares them in a
// streaming.Registry ("vwap", "rsi", "bollinger", "macd", "ma_crossover")
// with their parameters and classic defaults (RSI 14, Bollinger 20/2,
// MACD 12/26/9, crossover 50/200), so pipeline specs can name them.
//
// # Multi-valued indicators
//
// A graph edge carries one [streaming.Computed]. Indicators with several
// values (Bollinger upper/middle/lower, MACD line/signal/histogram) are
// therefore configured with the one value the node emits ([Band],
// [MACDComponent]); a graph that needs several declares one node per value.
// Each such node emits a signal whose Mode says something the value alone
// does not: Bollinger reports where the price stands against the bands
// ([AboveBand], [InsideBands], [BelowBand]), MACD the sign of the histogram
// ([Bullish], [Neutral], [Bearish]). [MACrossover] emits [GoldenCross] and
// [DeathCross] only on the record of a crossing.
//
// # Inputs, warm-up, bad input
//
// Every operator takes the price as its first input ([VWAP] also takes the
// volume). Each type's doc states its warm-up (what it emits before it has
// seen enough prices: by default nothing, except a rolling VWAP, which
// always averaged the trades it had; WithWarmup or the spec's "warmup"
// parameter picks the other policy) and which input it refuses: NaN and
// ±Inf, and magnitudes that could overflow its sums (a price of 1e308 in
// a 20-price average). A refused input leaves the state unchanged and
// Eval returns streaming.Rejected(), which the runtime counts; never a
// panic, never a NaN or ±Inf in the state or the output. Constructors panic on
// impossible parameters (fast ≥ slow, a window of 0 but VWAP's, which
// means cumulative); Builder.Build calls
// each factory once, so the mistake surfaces when the graph is built.
//
// # State
//
// Every operator saves a compact little-endian/varint blob that starts
// with its configuration; Load refuses a blob saved by a differently
// configured node with a *streaming.OperatorLoadError, and an undecodable
// blob with one wrapping streaming.ErrCorrupt. All are TypeVersion 1 but
// MACD, version 3 since it saves its warm-up policy (version 2) and the
// compensation of its EMAs' seed sums (version 3), and Bollinger, version
// 2 since it saves the largest sum of squared deviations since it was
// last recomputed; older blobs are migrated.
//
// # Concurrency
//
// Operators are not safe for concurrent use: the runtime makes one per key
// and calls it from the key's owning goroutine only.
package fintech
