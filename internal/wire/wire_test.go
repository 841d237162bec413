package wire

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestReaderRoundTrip(t *testing.T) {
	var b []byte
	b = binary.AppendUvarint(b, 300)
	b = binary.AppendVarint(b, -7)
	pad := len(b)
	b = append(b, 0, 0, 0, 0, 0)
	PutPaddedUvarint(b[pad:], 2)
	b = binary.AppendUvarint(b, 3)
	b = append(b, "abc"...)
	b = binary.AppendUvarint(b, 2)
	b = append(b, "xy"...)

	r := Reader{B: b}
	require.Equal(t, uint64(300), r.Uvarint())
	require.Equal(t, int64(-7), r.Varint())
	require.Equal(t, uint64(2), r.PaddedUvarint())
	require.Equal(t, []byte("abc"), r.Bytes())
	require.Equal(t, "xy", r.Str())
	require.NoError(t, r.Err)
	require.Equal(t, len(b), r.Off)
}

// TestPutPaddedUvarintRefusesWhatDoesNotFit: a value that needs more bits
// than the padded field holds panics, naming it, instead of being written
// as its low bits (2^35 in 5 bytes read back as 0); the largest that fits
// reads back.
func TestPutPaddedUvarintRefusesWhatDoesNotFit(t *testing.T) {
	b := make([]byte, 5)
	require.PanicsWithValue(t, "wire.PutPaddedUvarint: 34359738368 does not fit in 5 bytes (at most 34359738367)", func() { PutPaddedUvarint(b, 1<<35) })
	PutPaddedUvarint(b, 1<<35-1)
	r := Reader{B: b}
	require.Equal(t, uint64(1<<35-1), r.PaddedUvarint())
	require.NoError(t, r.Err)
	require.PanicsWithValue(t, "wire.PutPaddedUvarint: 1 does not fit in 0 bytes (at most 0)", func() { PutPaddedUvarint(nil, 1) })
	PutPaddedUvarint(make([]byte, 10), ^uint64(0)) // 70 bits hold any uint64
}

func TestReaderErrorsStick(t *testing.T) {
	cases := map[string]struct {
		b    []byte
		read func(*Reader)
		want string
	}{
		"truncated varint":    {[]byte{0x80}, func(r *Reader) { r.Uvarint() }, "truncated or overlong varint at byte 0"},
		"length past the end": {[]byte{5, 'a'}, func(r *Reader) { r.Bytes() }, "length 5 at byte 1 runs past the end"},
		"count too large":     {[]byte{9, 1}, func(r *Reader) { r.Count() }, "count 9 at byte 1 exceeds the 1 bytes left"},
		"short padded count":  {[]byte{0x80, 0}, func(r *Reader) { r.PaddedUvarint() }, "truncated entry count at byte 0"},
		"malformed padded":    {[]byte{1, 0, 0, 0, 0}, func(r *Reader) { r.PaddedUvarint() }, "malformed entry count at byte 0"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := Reader{B: c.b}
			c.read(&r)
			require.ErrorContains(t, r.Err, c.want)
			off := r.Off
			require.Zero(t, r.Uvarint(), "reads after an error return zero")
			require.Nil(t, r.Bytes())
			require.Equal(t, off, r.Off, "and do not move")
		})
	}
}

func TestAppendStringAndBytesReadBack(t *testing.T) {
	b := AppendString(nil, "topic/3")
	b = AppendBytes(b, []byte{0, 0xff})
	b = AppendBytes(b, nil)
	r := Reader{B: b}
	if got := r.Str(); got != "topic/3" {
		t.Fatalf("Str = %q", got)
	}
	if got := r.Bytes(); string(got) != "\x00\xff" {
		t.Fatalf("Bytes = %x", got)
	}
	if got := r.Bytes(); len(got) != 0 || r.Err != nil || r.Off != len(b) {
		t.Fatalf("empty Bytes = %x, err %v, off %d of %d", got, r.Err, r.Off, len(b))
	}
}
