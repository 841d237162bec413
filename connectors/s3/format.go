package s3

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"

	"github.com/tflo-io/tflo/internal/wire"
	"github.com/tflo-io/tflo/streaming"
)

// Byte formats of the objects the Store writes. All integers are unsigned
// varints unless noted; "str" is a uvarint length followed by the bytes.
//
// Segment object (immutable once written):
//
//	record... | trailer
//	record  = str key | str snapshot          (snapshot = streaming.MarshalSnapshot, own CRC32C)
//	trailer = record bytes (8 bytes, BE) | record count (8 bytes, BE) | CRC32C of the records (4 bytes, BE) | segmentMagic (8 bytes)
//
// Records are self-delimiting, so a segment describes itself (a scan from
// the start finds every key) without repeating the keys in an index; the
// manifest holds the index.
//
// Manifest object (rewritten on every commit; the commit point):
//
//	manifestMagic (8 bytes) | version | generation | epoch
//	| segment count | (str name | object size | record bytes)...
//	| key count | (str key | segment number | offset | length)...
//	| CRC32C of everything before (4 bytes, BE)
//
// The manifest carries the whole key index, so loading one key from a cold
// store is one GET of the manifest plus one ranged GET of the record.
// Stored compressed (the default, WithManifestCompression), the object is
// manifestZMagic (8 bytes) followed by one zstd frame of the bytes above;
// readers accept either form.
const (
	segmentMagic   = "TFS3SEG2"
	manifestMagic  = "TFS3MAN1"
	manifestZMagic = "TFS3MANZ"
	// maxManifestBytes bounds a decompressed manifest (a zstd bomb is
	// refused, not allocated): ~50M keys.
	maxManifestBytes = 1 << 30
	manifestVersion  = 1
	trailerLen       = 8 + 8 + 4 + len(segmentMagic)
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// loc is where one key's record lives.
type loc struct {
	seg string // segment name
	off uint64
	n   uint64
}

// segment is one live segment object as the manifest names it.
type segment struct {
	name string // object key below the store's prefix, e.g. "seg/00000000000000000007-1a2b3c4d.seg"
	size uint64 // whole object size, trailer included
	data uint64 // bytes of records (the part dead/live accounting covers)
	live uint64 // bytes of records still named by the index (derived, not stored)
}

// manifest is the decoded commit point: the live segments and the index.
type manifest struct {
	gen   uint64
	epoch uint64
	segs  map[string]*segment // by name
	index map[string]loc
}

func appendStr(dst, s []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// appendRecord appends one segment record and returns the new slice.
func appendRecord(dst, key, snap []byte) []byte {
	dst = appendStr(dst, key)
	return appendStr(dst, snap)
}

// segmentBuilder packs records into one segment object.
type segmentBuilder struct {
	buf   []byte
	count uint64
}

type segEntry struct {
	key    []byte
	off, n uint64
}

func (b *segmentBuilder) grow(n int) { b.buf = slices.Grow(b.buf, n) }

func (b *segmentBuilder) add(key []byte, s streaming.Snapshot) segEntry {
	off := uint64(len(b.buf))
	b.buf = appendStr(b.buf, key)
	b.buf = binary.AppendUvarint(b.buf, uint64(streaming.SnapshotEncodedLen(s)))
	b.buf = streaming.AppendSnapshot(b.buf, s)
	b.count++
	return segEntry{key: key, off: off, n: uint64(len(b.buf)) - off}
}

// addRaw copies an already-encoded record (compaction).
func (b *segmentBuilder) addRaw(key, rec []byte) segEntry {
	off := uint64(len(b.buf))
	b.buf = append(b.buf, rec...)
	b.count++
	return segEntry{key: key, off: off, n: uint64(len(rec))}
}

// finish appends the trailer; the result is the object body. It returns
// the body and the number of record bytes.
func (b *segmentBuilder) finish() (body []byte, data uint64) {
	data = uint64(len(b.buf))
	sum := crc32.Checksum(b.buf, castagnoli)
	body = binary.BigEndian.AppendUint64(b.buf, data)
	body = binary.BigEndian.AppendUint64(body, b.count)
	body = binary.BigEndian.AppendUint32(body, sum)
	body = append(body, segmentMagic...)
	return body, data
}

// decodeRecord splits one segment record into its key and snapshot bytes.
// The returned slices alias b.
func decodeRecord(b []byte) (key, snap []byte, err error) {
	r := wire.Reader{B: b}
	key = r.Bytes()
	snap = r.Bytes()
	if r.Err != nil {
		return nil, nil, fmt.Errorf("segment record: %v: %w", r.Err, streaming.ErrCorrupt)
	}
	if r.Off != len(b) {
		return nil, nil, fmt.Errorf("segment record: %d trailing bytes: %w", len(b)-r.Off, streaming.ErrCorrupt)
	}
	return key, snap, nil
}

// checkSegment checks a whole segment object's trailer and record
// checksum and returns the number of records.
func checkSegment(body []byte) (count uint64, err error) {
	if len(body) < trailerLen {
		return 0, fmt.Errorf("segment of %d bytes is shorter than its %d-byte trailer: %w", len(body), trailerLen, streaming.ErrCorrupt)
	}
	tr := body[len(body)-trailerLen:]
	if string(tr[20:]) != segmentMagic {
		return 0, fmt.Errorf("segment trailer magic %q, want %q: %w", tr[20:], segmentMagic, streaming.ErrCorrupt)
	}
	data := binary.BigEndian.Uint64(tr[:8])
	count = binary.BigEndian.Uint64(tr[8:16])
	if data != uint64(len(body)-trailerLen) {
		return 0, fmt.Errorf("segment trailer says %d record bytes, the object holds %d: %w", data, len(body)-trailerLen, streaming.ErrCorrupt)
	}
	if got, want := crc32.Checksum(body[:data], castagnoli), binary.BigEndian.Uint32(tr[16:20]); got != want {
		return 0, fmt.Errorf("segment record checksum %08x, trailer says %08x: %w", got, want, streaming.ErrCorrupt)
	}
	if count > data {
		return 0, fmt.Errorf("segment trailer says %d records in %d bytes: %w", count, data, streaming.ErrCorrupt)
	}
	return count, nil
}

// decodeSegment checks a whole segment object (checkSegment) and returns
// its records in order (keys alias body) and the record-bytes length.
func decodeSegment(body []byte) ([]segEntry, uint64, error) {
	count, err := checkSegment(body)
	if err != nil {
		return nil, 0, err
	}
	data := uint64(len(body) - trailerLen)
	recs := body[:data]
	r := wire.Reader{B: recs}
	entries := make([]segEntry, 0, int(min(count, 1<<16)))
	for r.Off < len(recs) && r.Err == nil {
		off := r.Off
		key := r.Bytes()
		r.Bytes()
		entries = append(entries, segEntry{key: key, off: uint64(off), n: uint64(r.Off - off)})
	}
	if r.Err == nil && uint64(len(entries)) != count {
		r.Err = fmt.Errorf("%d records, trailer says %d", len(entries), count)
	}
	if r.Err != nil {
		return nil, 0, fmt.Errorf("segment records: %v: %w", r.Err, streaming.ErrCorrupt)
	}
	return entries, data, nil
}

// validSegmentName reports whether name has the form of the names commit
// gives segments: seg/<generation:020d>-<random:08x>.seg.
func validSegmentName(name string) bool {
	rest, ok := strings.CutPrefix(name, segmentDir)
	if !ok || len(rest) != 20+1+8+len(".seg") || rest[20] != '-' || !strings.HasSuffix(rest, ".seg") {
		return false
	}
	for i := range 29 {
		c := rest[i]
		switch {
		case i < 20:
			if c < '0' || c > '9' {
				return false
			}
		case i > 20:
			if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return false
			}
		}
	}
	return true
}

// encodeManifest writes m: segments by name, keys in map order (sorting
// 100k keys would cost more than the rest of the encoding).
func encodeManifest(m *manifest) []byte {
	segs := slices.SortedFunc(maps.Values(m.segs), func(a, b *segment) int { return strings.Compare(a.name, b.name) })
	num := make(map[string]uint64, len(segs))
	for i, s := range segs {
		num[s.name] = uint64(i)
	}
	size := 64
	for k := range m.index {
		size += len(k) + 16
	}
	dst := make([]byte, 0, size+len(segs)*64)
	dst = append(dst, manifestMagic...)
	dst = binary.AppendUvarint(dst, manifestVersion)
	dst = binary.AppendUvarint(dst, m.gen)
	dst = binary.AppendUvarint(dst, m.epoch)
	dst = binary.AppendUvarint(dst, uint64(len(segs)))
	for _, s := range segs {
		dst = appendStr(dst, []byte(s.name))
		dst = binary.AppendUvarint(dst, s.size)
		dst = binary.AppendUvarint(dst, s.data)
	}
	dst = binary.AppendUvarint(dst, uint64(len(m.index)))
	var lastSeg string
	var lastNum uint64
	for k, l := range m.index {
		if l.seg != lastSeg {
			lastSeg, lastNum = l.seg, num[l.seg]
		}
		dst = binary.AppendUvarint(dst, uint64(len(k)))
		dst = append(dst, k...)
		dst = binary.AppendUvarint(dst, lastNum)
		dst = binary.AppendUvarint(dst, l.off)
		dst = binary.AppendUvarint(dst, l.n)
	}
	return binary.BigEndian.AppendUint32(dst, crc32.Checksum(dst, castagnoli))
}

var (
	manifestEncoder = sync.OnceValue(func() *zstd.Encoder {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
		if err != nil {
			panic(err) // only for invalid options
		}
		return e
	})
	manifestDecoder = sync.OnceValue(func() *zstd.Decoder {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxManifestBytes))
		if err != nil {
			panic(err) // only for invalid options
		}
		return d
	})
)

// compressManifest wraps an encoded manifest in the compressed form.
func compressManifest(enc []byte) []byte {
	return manifestEncoder().EncodeAll(enc, append(make([]byte, 0, len(enc)/2+64), manifestZMagic...))
}

// parseManifest decodes a manifest object in either form.
func parseManifest(b []byte) (*manifest, error) {
	if z, ok := bytes.CutPrefix(b, []byte(manifestZMagic)); ok {
		raw, err := manifestDecoder().DecodeAll(z, nil)
		if err != nil {
			return nil, fmt.Errorf("manifest: decompress %d bytes: %v: %w", len(z), err, streaming.ErrCorrupt)
		}
		b = raw
	}
	return decodeManifest(b)
}

// decodeManifest parses and checks a manifest; live byte counts of its
// segments are recomputed from the index.
func decodeManifest(b []byte) (*manifest, error) {
	if len(b) < len(manifestMagic)+4 {
		return nil, fmt.Errorf("manifest of %d bytes is too short: %w", len(b), streaming.ErrCorrupt)
	}
	if string(b[:len(manifestMagic)]) != manifestMagic {
		return nil, fmt.Errorf("manifest magic %q, want %q: %w", b[:len(manifestMagic)], manifestMagic, streaming.ErrCorrupt)
	}
	body := b[:len(b)-4]
	if got, want := crc32.Checksum(body, castagnoli), binary.BigEndian.Uint32(b[len(b)-4:]); got != want {
		return nil, fmt.Errorf("manifest checksum %08x, stored %08x: %w", got, want, streaming.ErrCorrupt)
	}
	r := wire.Reader{B: body, Off: len(manifestMagic)}
	if v := r.Uvarint(); r.Err == nil && v != manifestVersion {
		return nil, fmt.Errorf("manifest format version %d, this build reads %d: %w", v, manifestVersion, streaming.ErrCorrupt)
	}
	m := &manifest{gen: r.Uvarint(), epoch: r.Uvarint()}
	nseg := r.Count()
	m.segs = make(map[string]*segment, nseg)
	order := make([]*segment, 0, nseg)
	for i := 0; i < nseg && r.Err == nil; i++ {
		s := &segment{name: string(r.Bytes()), size: r.Uvarint(), data: r.Uvarint()}
		switch {
		case r.Err != nil:
		case !validSegmentName(s.name):
			// The names reach GET and DeleteObjects: anything but the
			// segment form could name another object of the bucket.
			r.Err = fmt.Errorf("segment %d: segment name %q is not of the form seg/<generation:020d>-<random:08x>.seg", i, s.name)
		case m.segs[s.name] != nil:
			r.Err = fmt.Errorf("segment %d: segment name %q is repeated", i, s.name)
		case s.size > maxPutBytes || s.data > s.size || s.size-s.data != uint64(trailerLen):
			r.Err = fmt.Errorf("segment %s: size %d and record bytes %d do not make a segment (record bytes + %d-byte trailer, at most %d bytes)", s.name, s.size, s.data, trailerLen, maxPutBytes)
		}
		m.segs[s.name] = s
		order = append(order, s)
	}
	nkey := r.Count()
	m.index = make(map[string]loc, nkey)
	// Keys are substrings of one copy of the key section: one allocation
	// instead of one per key.
	keyStart := r.Off
	all := string(body[keyStart:])
	for i := 0; i < nkey && r.Err == nil; i++ {
		kb := r.Bytes()
		koff := r.Off - len(kb) - keyStart
		k := all[koff : koff+len(kb)]
		sn := r.Uvarint()
		off := r.Uvarint()
		n := r.Uvarint()
		if r.Err != nil {
			break
		}
		if sn >= uint64(len(order)) {
			r.Err = fmt.Errorf("key %q names segment %d of %d", k, sn, len(order))
			break
		}
		s := order[sn]
		if off > s.data || n > s.data-off || n == 0 {
			r.Err = fmt.Errorf("key %q record %d+%d is outside segment %s's %d record bytes", k, off, n, s.name, s.data)
			break
		}
		before := len(m.index)
		m.index[k] = loc{seg: s.name, off: off, n: n}
		if len(m.index) == before {
			r.Err = fmt.Errorf("key %q appears twice", k)
			break
		}
		s.live += n
	}
	if r.Err == nil && r.Off != len(body) {
		r.Err = fmt.Errorf("%d trailing bytes", len(body)-r.Off)
	}
	if r.Err != nil {
		return nil, fmt.Errorf("manifest: %v: %w", r.Err, streaming.ErrCorrupt)
	}
	return m, nil
}
