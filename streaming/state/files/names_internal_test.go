package files

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

func TestFileNameRoundTrip(t *testing.T) {
	tests := map[string][]byte{
		"empty":  {},
		"binary": {0, 0xff, '/', '.'},
		"slash":  []byte("a/b/../c"),
		"upper":  []byte("ABC"),
		"long":   bytes.Repeat([]byte("x"), 123), // the longest plain name
		"hashed": bytes.Repeat([]byte("x"), 124),
	}
	for name, key := range tests {
		t.Run(name, func(t *testing.T) {
			for _, k := range []kind{kindSnapshot, kindCursor} {
				fn := fileName(k, key)
				require.LessOrEqual(t, len(fn), maxPlainName)
				gotKind, gotKey, hashed, ok, err := parseName(fn)
				require.NoError(t, err)
				require.True(t, ok)
				require.Equal(t, k, gotKind)
				require.Equal(t, len(key) > 123, hashed, "name %s", fn)
				if !hashed {
					require.True(t, bytes.Equal(key, gotKey))
				}
			}
		})
	}
}

func FuzzParseName(f *testing.F) {
	f.Add("s-")
	f.Add(fileName(kindSnapshot, []byte("a/b")))
	f.Add(fileName(kindCursor, bytes.Repeat([]byte("k"), 300)))
	f.Add("s-zz")
	f.Fuzz(func(t *testing.T, name string) {
		k, key, hashed, ok, err := parseName(name)
		if !ok || hashed {
			return
		}
		if err != nil {
			if !errors.Is(err, streaming.ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		// Any key (the name's bytes, reused as one) maps to a name that
		// parses back to it.
		_ = key
		fn := fileName(k, []byte(name))
		k2, key2, hashed2, ok2, err := parseName(fn)
		require.NoError(t, err)
		require.True(t, ok2)
		require.Equal(t, k, k2)
		if !hashed2 {
			require.Equal(t, name, string(key2))
		}
	})
}

func FuzzSplitKeyHeader(f *testing.F) {
	f.Add(appendKeyHeader(nil, []byte("a/b")))
	f.Add(appendKeyHeader([]byte{}, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		key, rest, err := splitKeyHeader(b)
		if err != nil {
			if !errors.Is(err, streaming.ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		again := append(appendKeyHeader(nil, key), rest...)
		k2, r2, err := splitKeyHeader(again)
		require.NoError(t, err)
		require.Equal(t, key, k2)
		require.Equal(t, rest, r2)
	})
}
