// Package connectors is the parent of one package per external system
// (kafka, mqtt, influx, parquet, s3); each implements contracts of package
// streaming with that system's client library and knows nothing of
// Temporal.
package connectors
