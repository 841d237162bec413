package streaming

// SnapshotFormatVersion is the current version of the snapshot encoding.
const SnapshotFormatVersion = 1

// Snapshot is one key's (or one shard's) durable state and the metadata
// that says what it reflects.
type Snapshot struct {
	Meta SnapshotMeta
	// Data is the state itself (for a keyed graph, Instance.Save's blob).
	Data []byte
}

// SnapshotMeta records what a snapshot reflects. Restore resumes after
// Cursor, so a record the snapshot already contains is never applied twice.
type SnapshotMeta struct {
	// FormatVersion of the encoding that wrote this snapshot.
	FormatVersion uint32 `json:"format_version"`
	// CursorType names the cursor encoding ("kafka", "mqtt", ...).
	CursorType string `json:"cursor_type,omitempty"`
	// Cursor is the Cursor.Bytes of the last record the state contains.
	Cursor []byte `json:"cursor,omitempty"`
	// Epoch is the owner epoch the snapshot was written under.
	Epoch Epoch `json:"epoch"`
	// Operators lists the graph's nodes, operator names and type versions.
	Operators []OperatorInfo `json:"operators,omitempty"`
	// SchemaFingerprint is the archive's Parquet schema fingerprint.
	SchemaFingerprint string `json:"schema_fingerprint,omitempty"`
	// CreatedUnixNano is when the snapshot was cut.
	CreatedUnixNano int64 `json:"created_unix_nano"`
}
