package parquet

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Thrift compact-protocol structures in archive files (the footer, page
// headers) and in pre-commit records come from outside the process.
// parquet-go's thrift decoder allocates a list's declared length before it
// reads a single element, so a four-byte field can ask for gigabytes.
// walkThrift checks a structure's shape without allocating before it is
// decoded: every declared length fits in the bytes that remain, nesting is
// shallow, and the memory the decoder would allocate for lists stays
// within a budget.

// Thrift compact-protocol type ids.
const (
	tcStop   = 0
	tcTrue   = 1
	tcFalse  = 2
	tcByte   = 3
	tcI16    = 4
	tcI32    = 5
	tcI64    = 6
	tcDouble = 7
	tcBinary = 8
	tcList   = 9
	tcSet    = 10
	tcMap    = 11
	tcStruct = 12
	tcUUID   = 13
)

// Decoded sizes the budget charges per list element: a struct element is
// charged as the largest parquet-go format struct the footer holds
// (ColumnChunk with its ColumnMetaData, 560 bytes on 64-bit platforms;
// the decoder allocates a list's elements and nothing more), anything
// else as a slice header. TestThriftStructCost pins the bound.
const (
	thriftStructCost = 576
	thriftScalarCost = 24
	thriftMaxDepth   = 32
)

var errThriftShape = errors.New("malformed thrift structure")

type thriftWalker struct {
	b      []byte
	off    int
	budget int64
}

// walkThrift checks that b starts with one compact-protocol struct whose
// decoding allocates at most budget bytes for lists, and returns the
// struct's length in bytes.
func walkThrift(b []byte, budget int64) (int, error) {
	w := thriftWalker{b: b, budget: budget}
	if err := w.structure(0); err != nil {
		return 0, err
	}
	return w.off, nil
}

func (w *thriftWalker) fail(format string, args ...any) error {
	return fmt.Errorf("%w at byte %d: %s", errThriftShape, w.off, fmt.Sprintf(format, args...))
}

func (w *thriftWalker) byte() (byte, error) {
	if w.off >= len(w.b) {
		return 0, w.fail("truncated")
	}
	c := w.b[w.off]
	w.off++
	return c, nil
}

func (w *thriftWalker) uvarint() (uint64, error) {
	v, n := binary.Uvarint(w.b[w.off:])
	if n <= 0 {
		return 0, w.fail("bad varint")
	}
	w.off += n
	return v, nil
}

func (w *thriftWalker) skip(n uint64) error {
	if n > uint64(len(w.b)-w.off) {
		return w.fail("length %d exceeds the %d bytes left", n, len(w.b)-w.off)
	}
	w.off += int(n)
	return nil
}

func (w *thriftWalker) charge(n uint64, each int64) error {
	if n > uint64(w.budget/each) {
		return w.fail("%d elements exceed the decode budget", n)
	}
	w.budget -= int64(n) * each
	return nil
}

func (w *thriftWalker) structure(depth int) error {
	if depth > thriftMaxDepth {
		return w.fail("nested deeper than %d", thriftMaxDepth)
	}
	for {
		h, err := w.byte()
		if err != nil {
			return err
		}
		typ := h & 0x0f
		if typ == tcStop {
			return nil
		}
		if h>>4 == 0 { // long form: the field id follows as a zigzag varint
			if _, err := w.uvarint(); err != nil {
				return err
			}
		}
		if err := w.value(typ, depth); err != nil {
			return err
		}
	}
}

func (w *thriftWalker) value(typ byte, depth int) error {
	switch typ {
	case tcTrue, tcFalse:
		return nil
	case tcByte:
		return w.skip(1)
	case tcI16, tcI32, tcI64:
		_, err := w.uvarint()
		return err
	case tcDouble:
		return w.skip(8)
	case tcUUID:
		return w.skip(16)
	case tcBinary:
		n, err := w.uvarint()
		if err != nil {
			return err
		}
		return w.skip(n)
	case tcList, tcSet:
		h, err := w.byte()
		if err != nil {
			return err
		}
		n, elem := uint64(h>>4), h&0x0f
		if n == 15 {
			if n, err = w.uvarint(); err != nil {
				return err
			}
		}
		return w.elements(n, elem, depth)
	case tcMap:
		n, err := w.uvarint()
		if err != nil || n == 0 {
			return err
		}
		kv, err := w.byte()
		if err != nil {
			return err
		}
		if n > uint64(len(w.b)-w.off) {
			return w.fail("map of %d entries in %d bytes", n, len(w.b)-w.off)
		}
		if err := w.charge(n, 2*thriftScalarCost); err != nil {
			return err
		}
		for range n {
			if err := w.value(kv>>4, depth+1); err != nil {
				return err
			}
			if err := w.value(kv&0x0f, depth+1); err != nil {
				return err
			}
		}
		return nil
	case tcStruct:
		return w.structure(depth + 1)
	}
	return w.fail("unknown type %d", typ)
}

// elements walks n list elements of type elem. Every element takes at
// least one byte (booleans in lists are one byte each), so a list longer
// than the bytes left is refused before anything is charged.
func (w *thriftWalker) elements(n uint64, elem byte, depth int) error {
	if n > uint64(len(w.b)-w.off) {
		return w.fail("list of %d elements in %d bytes", n, len(w.b)-w.off)
	}
	cost := int64(thriftScalarCost)
	if elem == tcStruct {
		cost = thriftStructCost
	}
	if err := w.charge(n, cost); err != nil {
		return err
	}
	for range n {
		var err error
		switch elem {
		case tcTrue, tcFalse:
			err = w.skip(1)
		default:
			err = w.value(elem, depth+1)
		}
		if err != nil {
			return err
		}
	}
	return nil
}
