package parquet

import (
	"encoding/binary"
	"fmt"
)

// zstd frames inside a page come from outside the process too. The
// decoder parquet-go uses (klauspost/compress, default limits) allocates
// the content size a frame header declares, up to 64 GiB, before it
// decodes a byte, and a failed allocation of that size is a fatal error no
// recover catches. zstdDecodedBound walks the frames of one page's data
// without decoding and returns an upper bound of what decoding produces
// and allocates; the page walk refuses pages whose bound exceeds the page's
// declared uncompressed size.

const (
	zstdMagic          = 0xFD2FB528
	zstdSkippableMask  = 0xFFFFFFF0
	zstdSkippableMagic = 0x184D2A50
	zstdMaxBlock       = 128 << 10
)

// zstdDecodedBound returns an upper bound of the bytes the frames in data
// decode to (and of the buffer a decoder allocates for them): for each
// frame, the larger of its declared content size and the sum of its
// blocks' largest possible output. The declared content sizes together
// must not exceed declared (the page's uncompressed size), and the bound
// must not exceed limit.
func zstdDecodedBound(data []byte, declared, limit int64) (int64, error) {
	var total, content int64
	for off := 0; off < len(data); {
		if len(data)-off < 4 {
			return 0, fmt.Errorf("zstd: %d trailing bytes after the last frame", len(data)-off)
		}
		magic := binary.LittleEndian.Uint32(data[off:])
		if magic&zstdSkippableMask == zstdSkippableMagic {
			if len(data)-off < 8 {
				return 0, fmt.Errorf("zstd: truncated skippable frame")
			}
			n := int64(binary.LittleEndian.Uint32(data[off+4:]))
			if n > int64(len(data)-off-8) {
				return 0, fmt.Errorf("zstd: skippable frame of %d bytes overruns the page", n)
			}
			off += 8 + int(n)
			continue
		}
		if magic != zstdMagic {
			return 0, fmt.Errorf("zstd: bad frame magic %#x at byte %d", magic, off)
		}
		n, fcs, bound, err := zstdFrame(data[off+4:], limit)
		if err != nil {
			return 0, err
		}
		off += 4 + n
		if content += fcs; content > declared {
			return 0, fmt.Errorf("zstd: frames declare %d bytes of content, the page %d", content, declared)
		}
		if total += bound; total > limit {
			return 0, fmt.Errorf("zstd: frames decode to more than %d bytes", limit)
		}
	}
	return total, nil
}

// zstdFrame walks one frame after its magic number and returns its
// length, its declared content size (0 when absent) and its decoded-size
// bound.
func zstdFrame(b []byte, limit int64) (n int, fcs int64, bound int64, err error) {
	if len(b) < 1 {
		return 0, 0, 0, fmt.Errorf("zstd: truncated frame header")
	}
	desc := b[0]
	off := 1
	fcsFlag := desc >> 6
	single := desc&0x20 != 0
	checksum := desc&0x04 != 0
	dictFlag := desc & 0x03
	if desc&0x08 != 0 {
		return 0, 0, 0, fmt.Errorf("zstd: reserved frame header bit set")
	}
	var window int64
	if !single {
		if len(b) < off+1 {
			return 0, 0, 0, fmt.Errorf("zstd: truncated window descriptor")
		}
		wd := b[off]
		off++
		exp := int64(wd >> 3)
		if exp > 31-10 { // window log above 31: no decoder accepts it
			return 0, 0, 0, fmt.Errorf("zstd: window log %d too large", 10+exp)
		}
		base := int64(1) << (10 + exp)
		window = base + base/8*int64(wd&7)
	}
	off += [4]int{0, 1, 2, 4}[dictFlag]
	fcsLen := [4]int{0, 2, 4, 8}[fcsFlag]
	if fcsFlag == 0 && single {
		fcsLen = 1
	}
	if len(b) < off+fcsLen {
		return 0, 0, 0, fmt.Errorf("zstd: truncated frame header")
	}
	var ufcs uint64
	hasFCS := fcsLen > 0
	switch fcsLen {
	case 1:
		ufcs = uint64(b[off])
	case 2:
		ufcs = uint64(binary.LittleEndian.Uint16(b[off:])) + 256
	case 4:
		ufcs = uint64(binary.LittleEndian.Uint32(b[off:]))
	case 8:
		ufcs = binary.LittleEndian.Uint64(b[off:])
	}
	off += fcsLen
	if hasFCS && ufcs > uint64(limit) {
		return 0, 0, 0, fmt.Errorf("zstd: frame declares %d bytes of content, more than %d", ufcs, limit)
	}
	fcs = int64(ufcs)
	if single {
		window = fcs
	}
	if window > limit {
		return 0, 0, 0, fmt.Errorf("zstd: window of %d bytes exceeds %d", window, limit)
	}
	blockMax := int64(zstdMaxBlock)
	if window > 0 && window < blockMax {
		blockMax = window
	}
	var out int64
	for {
		if len(b) < off+3 {
			return 0, 0, 0, fmt.Errorf("zstd: truncated block header")
		}
		h := uint32(b[off]) | uint32(b[off+1])<<8 | uint32(b[off+2])<<16
		off += 3
		last := h&1 != 0
		size := int64(h >> 3)
		switch (h >> 1) & 3 {
		case 0: // raw: size bytes of content follow
			if size > int64(len(b)-off) {
				return 0, 0, 0, fmt.Errorf("zstd: raw block of %d bytes overruns the frame", size)
			}
			off += int(size)
			out += size
		case 1: // RLE: one byte repeated size times
			if len(b) < off+1 {
				return 0, 0, 0, fmt.Errorf("zstd: truncated RLE block")
			}
			off++
			out += size
		case 2: // compressed: decodes to at most one block
			if size > int64(len(b)-off) {
				return 0, 0, 0, fmt.Errorf("zstd: compressed block of %d bytes overruns the frame", size)
			}
			off += int(size)
			out += blockMax
		default:
			return 0, 0, 0, fmt.Errorf("zstd: reserved block type")
		}
		if size > blockMax {
			return 0, 0, 0, fmt.Errorf("zstd: block of %d bytes exceeds the %d-byte maximum", size, blockMax)
		}
		if out > limit {
			return 0, 0, 0, fmt.Errorf("zstd: frame decodes to more than %d bytes", limit)
		}
		if last {
			break
		}
	}
	if checksum {
		if len(b) < off+4 {
			return 0, 0, 0, fmt.Errorf("zstd: truncated frame checksum")
		}
		off += 4
	}
	if fcs > out {
		out = fcs // the decoder allocates the declared size up front
	}
	return off, fcs, out, nil
}
