package parquet_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/streaming"
)

// FuzzReaderCorruptFile: archive files come from outside the process (a
// folder, a bucket). Whatever bytes a file holds, the reader returns rows
// or an error naming the file — it never panics.
func FuzzReaderCorruptFile(f *testing.F) {
	ctx := context.Background()
	good := goodFile(f)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add(good[len(good)/3:])
	f.Add([]byte("PAR1PAR1"))
	flipped := append([]byte(nil), good...)
	flipped[len(flipped)/2] ^= 0xff
	f.Add(flipped)
	f.Add(goodFile(f, parquet.WithCompression(parquet.Snappy)))
	f.Fuzz(func(t *testing.T, data []byte) {
		readAllOrNamedError(ctx, t, data)
	})
}

// FuzzReaderResealedFile: a file edited by someone who also fixes its
// whole-file checksum passes the checksum, so every other field the
// decoder trusts must be bounded (issue 17.5: a re-sealed 1.5 KB file
// asked the zstd decoder for 60 GiB and killed the process). Each input
// is mutated, its checksum re-sealed, and read in full: rows or an error
// naming the file, never a panic or a runaway allocation.
func FuzzReaderResealedFile(f *testing.F) {
	ctx := context.Background()
	good := goodFile(f)
	f.Add(good, uint16(0), byte(0))
	f.Add(good, uint16(len(good)-9), byte(0x7f)) // footer length
	f.Add(good, uint16(len(good)/2), byte(0xff))
	f.Add(good, uint16(40), byte(0x20)) // inside the first pages
	snappy := goodFile(f, parquet.WithCompression(parquet.Snappy))
	f.Add(snappy, uint16(40), byte(0x20))
	f.Add(snappy, uint16(len(snappy)/2), byte(0xff))
	f.Fuzz(func(t *testing.T, data []byte, at uint16, x byte) {
		data = append([]byte(nil), data...)
		if len(data) > 0 {
			data[int(at)%len(data)] ^= x
		}
		parquet.ResealChecksum(data)
		readAllOrNamedError(ctx, t, data)
	})
}

// goodFile returns a small valid archive file with several row groups.
func goodFile(tb testing.TB, opts ...parquet.WriterOption) []byte {
	ctx := context.Background()
	src := parquet.NewMemArchive()
	w, err := parquet.NewWriter(src, "iot", 0, 1, append([]parquet.WriterOption{parquet.WithRowGroupRows(8)}, opts...)...)
	if err != nil {
		tb.Fatal(err)
	}
	k, err := w.WriteFile(ctx, genRows(5, 0, 40))
	if err != nil {
		tb.Fatal(err)
	}
	o, _ := src.Open(ctx, k.Name())
	good := make([]byte, o.Size())
	o.ReadAt(good, 0)
	o.Close()
	return good
}

const fuzzName = "iot/shard-000000/00000000000000000000-00000000000000000039-e00000000000000000001.parquet"

// readAllOrNamedError stores data as an archive file and reads it in
// full; an error must name the file.
func readAllOrNamedError(ctx context.Context, t *testing.T, data []byte) {
	a := parquet.NewMemArchive()
	if err := a.PutAtomic(ctx, fuzzName, data); err != nil {
		t.Fatal(err)
	}
	r, err := parquet.NewReader(a, "iot/", parquet.WithBatchRows(4))
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, err := range r.All(ctx, parquet.Position{}) {
		if err != nil {
			if !strings.Contains(err.Error(), fuzzName) {
				t.Fatalf("error %q does not name the file", err)
			}
			return
		}
		if n++; n > 1_000_000 {
			t.Fatal("runaway read")
		}
	}
}

// Regression: parquet-go trusts the footer and panics (nil unsafe.Slice,
// negative slice bounds — a fatal error under -race's checkptr) on some
// corrupt files. The reader checks the footer's layout before decoding and
// recovers decoder panics, so a corrupt file is an error naming the file
// and wrapping streaming.ErrCorrupt. A deterministic sweep of byte
// corruptions of a valid file.
func TestReaderSurvivesCorruption(t *testing.T) {
	ctx := context.Background()
	good := goodFile(t)
	rng := rand.New(rand.NewPCG(sweepSeed, 2))
	corrupt := 0
	for i := range sweepInputs {
		data := append([]byte(nil), good...)
		for range 1 + rng.IntN(4) {
			data[rng.IntN(len(data))] = byte(rng.IntN(256))
		}
		a := parquet.NewMemArchive()
		if err := a.PutAtomic(ctx, fuzzName, data); err != nil {
			t.Fatal(err)
		}
		r, _ := parquet.NewReader(a, "iot/")
		for _, err := range r.All(ctx, parquet.Position{}) {
			if err != nil {
				if !strings.Contains(err.Error(), fuzzName) {
					t.Fatalf("input %d: error %q does not name the file", i, err)
				}
				if errors.Is(err, streaming.ErrCorrupt) {
					corrupt++
				}
				break
			}
		}
	}
	if corrupt == 0 {
		t.Fatal("no corruption was refused as ErrCorrupt; the sweep no longer covers the layout check")
	}
	t.Logf("%d of %d corruptions refused as corrupt (others fail the magic, the footer decode or the fingerprint)", corrupt, sweepInputs)
}

// Overridable in a scratch run to sweep wider.
var sweepInputs, sweepSeed = 400, uint64(1)
