// Package connectors is the parent of one package per external system
// (kafka, mqtt, influx, parquet, s3); each implements contracts of package
// streaming with that system's client library and knows nothing of
// Temporal.
//
// Bytes from outside are untrusted. The sources that decode them (kafka,
// mqtt) check every decoded reading against one streaming.Limits and
// dead-letter what falls outside, with the reason; the sinks refuse a
// single bad point or record on its own (influx, the kafka publisher)
// instead of failing a batch or every later write; and what the stores
// read back (s3 manifests and segments) is bounded before it drives an
// allocation or a request. Each of those decoders has a fuzz target.
package connectors
