// Package opstate is the state-blob toolkit shared by the operator catalogs
// (streaming/ops, streaming/fintech): append helpers and a sticky-error
// Decoder for compact, platform-independent blobs, and KSum, the
// compensated running sum behind every moving average.
//
// Blobs are built from unsigned varints (counts, sizes, indexes), signed
// varints (timestamps), single bytes (bools) and fixed 8-byte
// little-endian IEEE-754 floats (values, sums). Catalogs start every blob
// with the operator's configuration so Load can refuse state saved by a
// node configured differently instead of misreading it.
//
// Concurrency: values of this package are used by one goroutine.
package opstate
