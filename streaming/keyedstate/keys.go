package keyedstate

import (
	"bytes"
	"encoding/binary"
	"slices"
)

// A keyList's chunks double from firstKeyChunk to maxKeyChunk bytes: a
// short list costs little, a long one has few chunks and never copies
// much to grow.
const (
	firstKeyChunk = 256
	maxKeyChunk   = 1 << 20
)

// keyList is an append-only list of encoded keys (the keys changed in a
// generation), held in byte chunks: uvarint length | key bytes, repeated.
// A key takes its length plus one or two bytes, instead of the tens of
// bytes a map entry costs. The list may hold a key more than once (a key
// of an unsaved cut changed again); sorted drops the repeats.
type keyList struct {
	chunks [][]byte
	n      int
}

// add appends kb.
func (l *keyList) add(kb []byte) {
	need := binary.MaxVarintLen64 + len(kb)
	if len(l.chunks) == 0 || len(l.chunks[len(l.chunks)-1])+need > cap(l.chunks[len(l.chunks)-1]) {
		size := maxKeyChunk
		if len(l.chunks) < 12 {
			size = min(firstKeyChunk<<len(l.chunks), maxKeyChunk)
		}
		l.chunks = append(l.chunks, make([]byte, 0, max(size, need)))
	}
	c := &l.chunks[len(l.chunks)-1]
	*c = binary.AppendUvarint(*c, uint64(len(kb)))
	*c = append(*c, kb...)
	l.n++
}

// addAll appends every key of o (o is left as it was).
func (l *keyList) addAll(o *keyList) {
	for _, c := range o.chunks {
		for off := 0; off < len(c); {
			kb, next := keyAt(c, off)
			l.add(kb)
			off = next
		}
	}
}

// bytes is the memory the list holds.
func (l *keyList) bytes() int {
	n := 0
	for _, c := range l.chunks {
		n += cap(c)
	}
	return n + 24*cap(l.chunks)
}

func keyAt(c []byte, off int) (kb []byte, next int) {
	n, w := binary.Uvarint(c[off:])
	start := off + w
	return c[start : start+int(n)], start + int(n)
}

// keyRef locates a key in a keyList: chunk index << 32 | offset.
type keyRef uint64

func (l *keyList) at(r keyRef) []byte {
	kb, _ := keyAt(l.chunks[r>>32], int(uint32(r)))
	return kb
}

// sorted returns references to the list's distinct keys in byte order:
// O(n log n) in the keys of the list, 8 bytes per key.
func (l *keyList) sorted() []keyRef {
	refs := make([]keyRef, 0, l.n)
	for i, c := range l.chunks {
		for off := 0; off < len(c); {
			_, next := keyAt(c, off)
			refs = append(refs, keyRef(uint64(i)<<32|uint64(off)))
			off = next
		}
	}
	slices.SortFunc(refs, func(a, b keyRef) int { return bytes.Compare(l.at(a), l.at(b)) })
	return slices.CompactFunc(refs, func(a, b keyRef) bool { return bytes.Equal(l.at(a), l.at(b)) })
}
