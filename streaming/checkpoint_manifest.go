package streaming

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"

	"github.com/tflo-io/tflo/internal/wire"
)

// checkpointManifestVersion is the format version of a checkpoint
// manifest.
//
// Format (integers unsigned varints unless noted):
//
//	version | checkpoint id | epoch | run count | runs... | crc32c (4 bytes LE)
//	run   = checkpoint id | piece count | pieces...
//	piece = len(key) key | size
//
// The checksum (Castagnoli) covers every byte before it.
const checkpointManifestVersion = 1

// maxManifestPieces bounds what a decoder accepts, so a corrupt count
// cannot make it allocate without bound.
const maxManifestPieces = 1 << 24

// Manifest names the pieces that together make up a shard's full state at
// one checkpoint: runs, oldest first, each the pieces one checkpoint wrote
// (or one compaction merged). A key's state is its entry in the newest run
// that has it.
type Manifest struct {
	ID    CheckpointID  `json:"id"`
	Epoch Epoch         `json:"epoch"`
	Runs  []ManifestRun `json:"runs"`
}

// ManifestRun is the pieces one checkpoint (or compaction) wrote, in the
// order the source emitted them.
type ManifestRun struct {
	ID     CheckpointID    `json:"id"`
	Pieces []ManifestPiece `json:"pieces"`
}

// ManifestPiece is one stored piece: its StateStore key and its size.
type ManifestPiece struct {
	Key  string `json:"key"`
	Size int64  `json:"size"`
}

// Bytes returns the total size of the pieces the manifest names.
func (m Manifest) Bytes() int64 {
	var n int64
	for _, r := range m.Runs {
		for _, p := range r.Pieces {
			n += p.Size
		}
	}
	return n
}

// MarshalManifest encodes m (versioned, CRC32C-checksummed).
func MarshalManifest(m Manifest) []byte {
	b := binary.AppendUvarint(nil, checkpointManifestVersion)
	b = binary.AppendUvarint(b, uint64(m.ID))
	b = binary.AppendUvarint(b, uint64(m.Epoch))
	b = binary.AppendUvarint(b, uint64(len(m.Runs)))
	for _, r := range m.Runs {
		b = binary.AppendUvarint(b, uint64(r.ID))
		b = binary.AppendUvarint(b, uint64(len(r.Pieces)))
		for _, p := range r.Pieces {
			b = wire.AppendString(b, p.Key)
			b = binary.AppendUvarint(b, uint64(p.Size))
		}
	}
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, wire.Castagnoli))
}

// UnmarshalManifest decodes a manifest made by MarshalManifest. Bytes that
// fail the checksum, are truncated, or carry another format version are
// refused with an error wrapping ErrCorrupt.
func UnmarshalManifest(b []byte) (Manifest, error) {
	if len(b) < 5 {
		return Manifest{}, fmt.Errorf("checkpoint manifest: %d bytes is too short: %w", len(b), ErrCorrupt)
	}
	body, sum := b[:len(b)-4], binary.LittleEndian.Uint32(b[len(b)-4:])
	if got := crc32.Checksum(body, wire.Castagnoli); got != sum {
		return Manifest{}, fmt.Errorf("checkpoint manifest: checksum %08x does not match stored %08x: %w", got, sum, ErrCorrupt)
	}
	r := wire.Reader{B: body}
	if v := r.Uvarint(); r.Err == nil && v != checkpointManifestVersion {
		return Manifest{}, fmt.Errorf("checkpoint manifest: format version %d, this build reads %d: %w", v, checkpointManifestVersion, ErrCorrupt)
	}
	var m Manifest
	m.ID = CheckpointID(r.Uvarint())
	m.Epoch = Epoch(r.Uvarint())
	nRuns := r.Uvarint()
	total := uint64(0)
	for i := uint64(0); i < nRuns && r.Err == nil; i++ {
		var run ManifestRun
		run.ID = CheckpointID(r.Uvarint())
		nPieces := r.Uvarint()
		total += nPieces
		if total > maxManifestPieces || nPieces > uint64(len(body)) {
			return Manifest{}, fmt.Errorf("checkpoint manifest: run %d claims %d pieces: %w", run.ID, nPieces, ErrCorrupt)
		}
		for j := uint64(0); j < nPieces && r.Err == nil; j++ {
			key := r.Str()
			size := r.Uvarint()
			run.Pieces = append(run.Pieces, ManifestPiece{Key: key, Size: int64(size)})
		}
		m.Runs = append(m.Runs, run)
	}
	if r.Err != nil {
		return Manifest{}, fmt.Errorf("checkpoint manifest: %v: %w", r.Err, ErrCorrupt)
	}
	if r.Off != len(body) {
		return Manifest{}, fmt.Errorf("checkpoint manifest: %d trailing bytes: %w", len(body)-r.Off, ErrCorrupt)
	}
	return m, nil
}
