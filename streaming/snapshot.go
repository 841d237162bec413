package streaming

// SnapshotFormatVersion is the version of the snapshot encoding
// MarshalSnapshot writes for a snapshot whose metadata records no dropped
// nodes (SnapshotMeta.DroppedNodes): every build reads it.
const SnapshotFormatVersion = 1

// SnapshotFormatVersionDropped is the version MarshalSnapshot writes for a
// snapshot whose metadata records dropped nodes: version 1 with the
// dropped node names after the operators. Builds before it refuse such a
// snapshot (naming the version), so a pipeline that dropped a node's
// state cannot go back to a build that would load the state its keys may
// still hold for that node.
const SnapshotFormatVersionDropped = 2

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
	// DroppedNodes lists, sorted, the nodes whose saved state a restore
	// dropped because the graph no longer had them (allow non-restored
	// state, see WithNonRestoredState). Keys not written since may still
	// hold those nodes' state: it is never loaded, and a graph that adds
	// a node of such a name again is refused at restore.
	DroppedNodes []string `json:"dropped_nodes,omitempty"`
	// SchemaFingerprint is the archive's Parquet schema fingerprint.
	SchemaFingerprint string `json:"schema_fingerprint,omitempty"`
	// CreatedUnixNano is when the snapshot was cut.
	CreatedUnixNano int64 `json:"created_unix_nano"`
}
