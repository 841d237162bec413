package pipeline_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/pipeline"
)

// TestByteSizeRefusesWhatIsNoNumberOfBytes: "NaN" (with or without a
// unit) parsed as a size, a negative one on amd64 (0 on arm64), so
// state.memory: NaN was refused as "-9223372036854775808 must be
// positive" and an archive's target_file_size: NaN silently became the
// default.
func TestByteSizeRefusesWhatIsNoNumberOfBytes(t *testing.T) {
	for _, s := range []string{"NaN", "nan", "NaNMiB", "-1KiB", "inf", "+Inf", "8EiB", "9.3e18", "", "MiB", "1KiBB"} {
		var b pipeline.ByteSize
		require.ErrorContains(t, b.UnmarshalText([]byte(s)), "is not a number of bytes", "%q", s)
	}
	for s, want := range map[string]pipeline.ByteSize{"0": 0, "4096": 4096, "4KiB": 4096, "1 KB": 1000, "256MiB": 256 << 20, "0.5GiB": 512 << 20, "1e3": 1000} {
		var b pipeline.ByteSize
		require.NoError(t, b.UnmarshalText([]byte(s)), "%q", s)
		require.Equal(t, want, b, "%q", s)
	}
}

// TestByteSizeRefusesLessThanOneByte: a positive size under one byte
// ("0.5", a unit forgotten) parsed as 0, which every setting reads as
// its default: state.memory: 0.5 ran with 256MiB, max_packet_size: 0.5
// with 64KiB, without a word.
func TestByteSizeRefusesLessThanOneByte(t *testing.T) {
	for _, s := range []string{"0.5", "0.5B", "1e-9KiB", "0.0001"} {
		var b pipeline.ByteSize
		require.ErrorContains(t, b.UnmarshalText([]byte(s)), "is less than one byte", "%q", s)
	}
	for s, want := range map[string]pipeline.ByteSize{"0": 0, "0B": 0, "1.5": 1, "0.1KiB": 102} {
		var b pipeline.ByteSize
		require.NoError(t, b.UnmarshalText([]byte(s)), "%q", s)
		require.Equal(t, want, b, "%q", s)
	}
	_, err := pipeline.Parse([]byte(`name: plant
source:
  kafka: {brokers: [localhost:9092], topic: readings}
graph:
  inputs: [value]
  nodes:
    - {name: mean, type: sma, inputs: [value], params: {window: 3}}
state: {memory: 0.5}
`))
	require.ErrorContains(t, err, "is less than one byte")
}
