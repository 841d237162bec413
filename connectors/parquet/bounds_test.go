package parquet_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"runtime"
	"testing"

	pq "github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/streaming"
)

// Regression (issue 17.5): fields of a file sized parquet-go's
// allocations before anything was checked. A footer length of 2 GiB in a
// small file allocated it while planning, and a zstd frame declaring
// 60 GiB of content killed the process ("fatal error: out of memory",
// which recover cannot catch) even with a valid (re-sealed) checksum.
// Both files must be refused as corrupt, naming the file, with little
// memory allocated.
func TestReaderBoundsHostileSizes(t *testing.T) {
	good := goodFile(t)
	cases := []struct {
		name   string
		mutate func(t *testing.T, data []byte)
		opts   []parquet.WriterOption
	}{
		{"footer length", func(t *testing.T, data []byte) {
			binary.LittleEndian.PutUint32(data[len(data)-8:], 0x7ffffff0)
		}, nil},
		{"zstd content size", func(t *testing.T, data []byte) {
			// One frame with a 1 KiB window and an 8-byte content size of
			// 60 GiB, then one raw block holding the rest of the page's
			// bytes; the page CRC is fixed too (an attacker fixes every
			// checksum).
			craftPage(t, data, func(body []byte) {
				binary.LittleEndian.PutUint32(body, 0xFD2FB528)
				body[4] = 0xC0 // 8-byte content size, not single segment
				body[5] = 0x00 // window 1 KiB
				binary.LittleEndian.PutUint64(body[6:], 60<<30)
				n := len(body) - 17
				h := uint32(n)<<3 | 1 // raw, last
				body[14], body[15], body[16] = byte(h), byte(h>>8), byte(h>>16)
			})
		}, nil},
		{"snappy decoded length", func(t *testing.T, data []byte) {
			// A snappy block's first bytes are its decoded length: 3 GiB
			// here (the decoder allocates it before anything else).
			craftPage(t, data, func(body []byte) {
				binary.PutUvarint(body, 3<<30)
			})
		}, []parquet.WriterOption{parquet.WithCompression(parquet.Snappy)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			data := append([]byte(nil), good...)
			if tc.opts != nil {
				data = goodFile(t, tc.opts...)
			}
			tc.mutate(t, data)
			if !parquet.ResealChecksum(data) {
				t.Fatal("could not re-seal the checksum")
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			err := readFileBytes(t, data)
			runtime.ReadMemStats(&after)
			if !errors.Is(err, streaming.ErrCorrupt) {
				t.Fatalf("read: %v, want an error wrapping streaming.ErrCorrupt", err)
			}
			if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
				t.Fatalf("reading the file allocated %d MiB", grew>>20)
			}
		})
	}
}

func readFileBytes(t *testing.T, data []byte) error {
	ctx := context.Background()
	a := parquet.NewMemArchive()
	if err := a.PutAtomic(ctx, fuzzName, data); err != nil {
		t.Fatal(err)
	}
	r, err := parquet.NewReader(a, "iot/")
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range r.All(ctx, parquet.Position{}) {
		if err != nil {
			return err
		}
	}
	return nil
}

// craftPage rewrites the body of the largest first data page of the
// first row group with edit (given at least 18 bytes) and fixes the page's
// CRC, keeping the header's length.
func craftPage(t *testing.T, data []byte, edit func(body []byte)) {
	f, err := pq.OpenFile(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		t.Fatal(err)
	}
	var best pageLoc
	for _, cc := range f.Metadata().RowGroups[0].Columns {
		if p := locatePage(t, data, cc.MetaData.DataPageOffset); p.size > best.size {
			best = p
		}
	}
	body := data[best.body : best.off+int64(best.hdrLen)+int64(best.size)]
	if len(body) < 18 {
		t.Fatalf("page body of %d bytes is too small to craft", len(body))
	}
	edit(body)
	page := data[best.off+int64(best.hdrLen) : best.off+int64(best.hdrLen)+int64(best.size)]
	for k := range 256 {
		body[len(body)-1] = byte(k)
		best.h.CRC = int32(crc32.ChecksumIEEE(page))
		enc, err := thrift.Marshal(new(thrift.CompactProtocol), &best.h)
		if err != nil {
			t.Fatal(err)
		}
		if len(enc) == best.hdrLen {
			copy(data[best.off:], enc)
			return
		}
	}
	t.Fatal("no page CRC keeps the header's length")
}

type pageLoc struct {
	off    int64 // header
	hdrLen int
	body   int64 // compressed values (after v2 levels)
	size   int32 // compressed page size
	h      format.PageHeader
}

func locatePage(t *testing.T, data []byte, off int64) pageLoc {
	r := bytes.NewReader(data[off:])
	var h format.PageHeader
	if err := thrift.NewDecoder(new(thrift.CompactProtocol).NewReader(r)).Decode(&h); err != nil {
		t.Fatal(err)
	}
	hdr := len(data[off:]) - r.Len()
	levels := int64(0)
	if h.DataPageHeaderV2.Valid {
		levels = int64(h.DataPageHeaderV2.V.DefinitionLevelsByteLength + h.DataPageHeaderV2.V.RepetitionLevelsByteLength)
	}
	return pageLoc{off: off, hdrLen: hdr, body: off + int64(hdr) + levels, size: h.CompressedPageSize, h: h}
}
