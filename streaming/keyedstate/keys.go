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
// bytes a map entry costs. A key is listed once (see Runtime.listed and
// cut.Release), but for a key of an unsaved cut changed again and spilled
// before the release: it stays in two places (counted in repeats), and
// sorted and keySource drop the repeat.
type keyList struct {
	chunks  [][]byte
	n       int          // keys added to the chunks
	runs    []spilledRun // keys spilled to Badger (see spill.go)
	repeats int          // keys listed twice (see cut.Release): keys does not count them
}

// keyMark is a keyList's length, to take back the keys added since.
type keyMark struct{ chunks, last, n int }

// mark returns the list's length now.
func (l *keyList) mark() keyMark {
	m := keyMark{chunks: len(l.chunks), n: l.n}
	if m.chunks > 0 {
		m.last = len(l.chunks[m.chunks-1])
	}
	return m
}

// truncate takes back the keys added since m (the list's chunks must not
// have been handed on since: a keyRef into them would dangle).
func (l *keyList) truncate(m keyMark) {
	clear(l.chunks[m.chunks:])
	l.chunks = l.chunks[:m.chunks]
	if m.chunks > 0 {
		l.chunks[m.chunks-1] = l.chunks[m.chunks-1][:m.last]
	}
	l.n = m.n
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

// addAll appends every key of o's chunks but those skip reports (nil:
// none), and takes over its spilled runs and repeats (o is left as it
// was).
func (l *keyList) addAll(o *keyList, skip func(kb []byte) bool) {
	l.runs = append(l.runs, o.runs...)
	l.repeats += o.repeats
	for _, c := range o.chunks {
		for off := 0; off < len(c); {
			kb, next := keyAt(c, off)
			if skip == nil || !skip(kb) {
				l.add(kb)
			}
			off = next
		}
	}
}

// memBytes is the memory the list's chunks hold.
func (l *keyList) memBytes() int {
	n := 0
	for _, c := range l.chunks {
		n += cap(c)
	}
	return n + 24*cap(l.chunks)
}

// bytes is the memory the list holds: its chunks and the record of its
// spilled runs.
func (l *keyList) bytes() int { return l.memBytes() + 32*cap(l.runs) }

// keys is the number of distinct keys recorded.
func (l *keyList) keys() int {
	n := l.n - l.repeats
	for _, r := range l.runs {
		n += r.keys
	}
	return n
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

// sorted returns references to the distinct keys of the list's chunks
// (not its spilled runs) in byte order: O(n log n) in those keys, 8 bytes
// per key.
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
