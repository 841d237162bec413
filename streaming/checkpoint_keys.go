package streaming

import (
	"bytes"
	"strconv"
)

// The keys a Checkpointer writes to its StateStore, for shard S:
//
//	S/manifest                      the checkpoint manifest (the commit point)
//	S/piece/<epoch>/<id>/<n>        piece n of the run checkpoint id wrote at epoch
//
// Every key of a shard starts with the shard's name, so a store can keep
// each shard's keys apart — its own commit point per shard — with
// CheckpointKeyShard.

// CheckpointManifestKey is the key of shard's checkpoint manifest.
func CheckpointManifestKey(shard string) []byte { return []byte(shard + "/manifest") }

// CheckpointPieceKey is the key of piece n of the run checkpoint id wrote
// at epoch.
func CheckpointPieceKey(shard string, epoch Epoch, id CheckpointID, n int) string {
	return shard + "/piece/" + strconv.FormatUint(uint64(epoch), 10) + "/" +
		strconv.FormatUint(uint64(id), 10) + "/" + strconv.Itoa(n)
}

// CheckpointKeyShard returns the shard a Checkpointer's key belongs to
// (the inverse of CheckpointManifestKey and CheckpointPieceKey), or false
// for a key of any other form.
func CheckpointKeyShard(key []byte) (string, bool) {
	if shard, ok := bytes.CutSuffix(key, []byte("/manifest")); ok && len(shard) > 0 {
		return string(shard), true
	}
	// S/piece/<epoch>/<id>/<n>: three decimal fields from the right.
	rest := key
	for range 3 {
		i := bytes.LastIndexByte(rest, '/')
		if i < 0 || !decimal(rest[i+1:]) {
			return "", false
		}
		rest = rest[:i]
	}
	if shard, ok := bytes.CutSuffix(rest, []byte("/piece")); ok && len(shard) > 0 {
		return string(shard), true
	}
	return "", false
}

// decimal reports a non-empty run of ASCII digits.
func decimal(b []byte) bool {
	if len(b) == 0 || len(b) > 20 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
