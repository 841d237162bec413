package streaming_test

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

func TestKafkaOffsetRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		in   streaming.KafkaOffset
		str  string
	}{
		{"start", streaming.KafkaOffset{Topic: "readings", Partition: 0, Offset: -1}, "readings/0@-1"},
		{"typical", streaming.KafkaOffset{Topic: "iot.sensor_readings-v2", Partition: 17, Offset: 1041}, "iot.sensor_readings-v2/17@1041"},
		{"extremes", streaming.KafkaOffset{Topic: strings.Repeat("t", 249), Partition: math.MaxInt32, Offset: math.MaxInt64}, strings.Repeat("t", 249) + "/2147483647@9223372036854775807"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, tc.in.Validate())
			got, err := streaming.ParseKafkaOffset(tc.in.Bytes())
			require.NoError(t, err)
			require.Equal(t, tc.in, got)
			require.Equal(t, tc.str, got.String())
			require.Equal(t, tc.in.Offset+1, got.Next())
		})
	}
}

func TestParseKafkaOffsetRefuses(t *testing.T) {
	valid := streaming.KafkaOffset{Topic: "t", Partition: 1, Offset: 5}.Bytes()
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "'K' tag"},
		{"wrong tag", append([]byte{'M'}, valid[1:]...), "'K' tag"},
		{"future version", append([]byte{'K', 9}, valid[2:]...), "encoding version 9"},
		{"truncated", valid[:len(valid)-1], "truncated"},
		{"trailing", append(append([]byte(nil), valid...), 0), "trailing"},
		{"empty topic", streaming.KafkaOffset{Partition: 1}.Bytes(), "empty topic"},
		{"bad topic", streaming.KafkaOffset{Topic: "a/b", Partition: 1}.Bytes(), `topic "a/b" has byte '/'`},
		{"long topic", streaming.KafkaOffset{Topic: strings.Repeat("x", 250)}.Bytes(), "longer than Kafka's limit"},
		{"negative partition", streaming.KafkaOffset{Topic: "t", Partition: -1}.Bytes(), "partition -1 out of range"},
		{"offset below -1", streaming.KafkaOffset{Topic: "t", Offset: -2}.Bytes(), "below -1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := streaming.ParseKafkaOffset(tc.in)
			require.ErrorIs(t, err, streaming.ErrCorrupt)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func FuzzParseKafkaOffset(f *testing.F) {
	f.Add(streaming.KafkaOffset{Topic: "readings", Partition: 3, Offset: 99}.Bytes())
	f.Add(streaming.KafkaOffset{Topic: "a", Partition: 0, Offset: -1}.Bytes())
	f.Add([]byte("K\x01"))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := streaming.ParseKafkaOffset(b)
		if err != nil {
			if !errors.Is(err, streaming.ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		require.NoError(t, k.Validate())
		again, err := streaming.ParseKafkaOffset(k.Bytes())
		require.NoError(t, err)
		require.Equal(t, k, again)
	})
}
