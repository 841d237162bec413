package parquet

import (
	"crypto/sha256"
	"encoding/hex"
	"sync"

	pq "github.com/parquet-go/parquet-go"
)

// Row is one derived signal in the archive. Its fields are the archive's
// fixed schema, version 1 (message "tflo_signal"):
//
//	column  parquet type                          meaning
//	sensor  BYTE_ARRAY (STRING), dictionary       the key: sensor id or symbol
//	signal  BYTE_ARRAY (STRING), dictionary       name of the derived signal (the Influx measurement)
//	ts      INT64 (TIMESTAMP(NANOS, UTC))         event time, unix nanoseconds
//	mode    INT32                                 the signal's streaming.Mode
//	value   DOUBLE                                the signal's value
//	offset  INT64                                 source offset of the record that produced it
//
// All columns are required. Rows of one file are in source order: offset
// never decreases (several signals of one record share its offset).
// Changing any of this changes [SchemaFingerprint], and readers expecting
// the old fingerprint refuse the new files (and vice versa).
//
// The writers encode ts and offset DELTA_BINARY_PACKED (both grow
// steadily: fewer bytes for zstd to compress, a quarter less CPU per row
// and a fifth smaller files, BenchmarkRollingCompression), and mode too (it
// rarely changes: a few bytes a page); files written before hold them
// PLAIN. An encoding is not part of the schema: the
// fingerprint is the same, and readers read both. The archive's writers
// encode row groups themselves (columnEncoder, with these encodings); the
// tags make parquet-go's writer, which the tests compare with, do the
// same.
type Row struct {
	Sensor string  `parquet:"sensor,dict"`
	Signal string  `parquet:"signal,dict"`
	TS     int64   `parquet:"ts,timestamp(nanosecond:utc),delta"`
	Mode   int32   `parquet:"mode,delta"`
	Value  float64 `parquet:"value"`
	Offset int64   `parquet:"offset,delta"`
}

// SchemaName is the Parquet message name of the archive schema.
const SchemaName = "tflo_signal"

// FingerprintKey is the key of the file key-value metadata entry holding
// the schema fingerprint.
const FingerprintKey = "tflo.schema.fingerprint"

var (
	schemaOnce  sync.Once
	schema      *pq.Schema
	fingerprint string
)

func initSchema() {
	schema = pq.NewSchema(SchemaName, pq.SchemaOf(Row{}))
	fingerprint = Fingerprint(schema)
}

// Schema returns the archive's Parquet schema.
func Schema() *pq.Schema {
	schemaOnce.Do(initSchema)
	return schema
}

// SchemaFingerprint returns the fingerprint of [Schema]: the value every
// file this package writes stores under [FingerprintKey], and the value a
// checkpointer stamps into streaming.SnapshotMeta.SchemaFingerprint.
func SchemaFingerprint() string {
	schemaOnce.Do(initSchema)
	return fingerprint
}

// Fingerprint returns a stable hash of a Parquet schema: "pq1-" and the
// first 16 bytes of the SHA-256 of its canonical text (the Parquet message
// definition: names, physical and logical types, repetition, in column
// order), hex encoded. Two schemas get the same fingerprint exactly when
// their message definitions are equal.
func Fingerprint(s *pq.Schema) string {
	sum := sha256.Sum256([]byte(s.String()))
	return "pq1-" + hex.EncodeToString(sum[:16])
}
