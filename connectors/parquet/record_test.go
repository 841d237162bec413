package parquet

import (
	"context"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"strings"
	"testing"

	"github.com/tflo-io/tflo/streaming"
)

func sampleRecord(t testing.TB) []byte {
	b := newFileBuilder(writerConfig{zstdLevel: 3, rowGroupRows: 64})
	b.start()
	rows := make([]Row, 40)
	for i := range rows {
		rows[i] = Row{Sensor: "s", Signal: "mean", TS: int64(i), Value: float64(i), Offset: int64(i)}
	}
	if _, err := b.appendRows(rows); err != nil {
		t.Fatal(err)
	}
	st := b.state()
	rgs, err := encodeRowGroups(st.RowGroups)
	if err != nil {
		t.Fatal(err)
	}
	rec := &record{
		recordHeader: recordHeader{Pipeline: "iot", Shard: 1, Epoch: 2, Cut: 45,
			Sealed: []sealedInfo{{uploadInfo: uploadInfo{Staging: "_tflo/staging/iot/shard-000001/x", UploadID: "u1", Parts: []Part{{Number: 1, Size: 10}}},
				Name: FileKey{Pipeline: "iot", Shard: 1, Epoch: 2, First: 0, Last: 3}.Name(), Rows: 4, Size: 10, SealedAt: 40}},
			Open: &openInfo{uploadInfo: uploadInfo{Staging: "_tflo/staging/iot/shard-000001/y", UploadID: "u2", Parts: []Part{{Number: 1, Size: 4}}},
				Epoch: 2, Size: st.Size, CRC: st.CRC, Rows: st.Rows, First: st.First, Last: st.Last, RowGroups: rgs}},
		tailRows: rows[:5],
	}
	full := make([]byte, st.Size-4)
	rec.tailBytes = full
	data, err := encodeRecord(rec, newFileBuilder(writerConfig{zstdLevel: 3, rowGroupRows: 64}))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func TestRecordRoundTrip(t *testing.T) {
	data := sampleRecord(t)
	rec, err := decodeRecord(context.Background(), "r", data)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Cut != 45 || len(rec.Sealed) != 1 || rec.Open == nil || len(rec.tailRows) != 5 || rec.tailRows[4].Offset != 4 {
		t.Fatalf("decoded %+v", rec.recordHeader)
	}
	rgs, err := decodeRowGroups(rec.Open.RowGroups)
	if err != nil || len(rgs) == 0 {
		t.Fatalf("row groups: %v, %d", err, len(rgs))
	}
}

// FuzzDecodeRecord: pre-commit records are read back from the archive
// (after a crash, by another process), so any bytes, even with a valid
// checksum, decode to a record or an error, never a panic or a runaway
// allocation.
func FuzzDecodeRecord(f *testing.F) {
	data := sampleRecord(f)
	f.Add(data, uint16(0), byte(0))
	f.Add(data, uint16(12), byte(0x7f))
	f.Add(data, uint16(len(data)-30), byte(0xff))
	f.Fuzz(func(t *testing.T, data []byte, at uint16, x byte) {
		data = append([]byte(nil), data...)
		if len(data) > 4 {
			data[int(at)%(len(data)-4)] ^= x
			binary.LittleEndian.PutUint32(data[len(data)-4:], crc32.Checksum(data[:len(data)-4], castagnoli))
		}
		rec, err := decodeRecord(context.Background(), "r", data)
		if err != nil {
			return
		}
		if rec.Open != nil {
			_, _ = decodeRowGroups(rec.Open.RowGroups)
		}
	})
}

// Row-group segments are read back from the archive by another process:
// one decodes to its row groups, and a flipped byte, a wrong count or
// another object is refused with an error naming the segment and
// wrapping streaming.ErrCorrupt.
func TestSegmentRoundTripAndCorruption(t *testing.T) {
	b := newFileBuilder(writerConfig{zstdLevel: 3, rowGroupRows: 16})
	b.start()
	rows := make([]Row, 40)
	for i := range rows {
		rows[i] = Row{Sensor: "s", Signal: "mean", TS: int64(i), Offset: int64(i)}
	}
	if _, err := b.appendRows(rows); err != nil {
		t.Fatal(err)
	}
	rgs := b.state().RowGroups
	data, err := encodeSegment(rgs)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := decodeSegment("seg", data, len(rgs)); err != nil || len(got) != len(rgs) || got[2].NumRows != rgs[2].NumRows {
		t.Fatalf("decoded %d row groups, %v", len(got), err)
	}
	flipped := append([]byte(nil), data...)
	flipped[20] ^= 0x40
	for name, c := range map[string]struct {
		data []byte
		n    int
	}{"flipped byte": {flipped, len(rgs)}, "wrong count": {data, len(rgs) + 1}, "a record": {sampleRecord(t), 1}, "empty": {nil, 0}} {
		_, err := decodeSegment("seg-x", c.data, c.n)
		if !errors.Is(err, streaming.ErrCorrupt) || !strings.Contains(err.Error(), "seg-x") {
			t.Errorf("%s: %v", name, err)
		}
	}
}
