package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
)

// counterSource is a minimal CheckpointSource: one counter whose value is
// the state, at a Kafka offset cursor.
type counterSource struct {
	mu     sync.Mutex
	value  int64
	offset int64
}

func (s *counterSource) apply(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.value += n
	s.offset++
}

type counterCut struct{ value, offset int64 }

func (s *counterSource) Cut(context.Context) (streaming.Cut, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return counterCut{s.value, s.offset}, nil
}

func (c counterCut) Cursor() (string, []byte) {
	return "kafka", streaming.KafkaOffset{Topic: "readings", Partition: 3, Offset: c.offset}.Bytes()
}

func (c counterCut) Pieces(_ context.Context, emit func([]byte) error) error {
	b, _ := json.Marshal(c.value)
	return emit(b)
}

func (c counterCut) Release(bool) {}

func (s *counterSource) Restore(_ context.Context, _ string, cursor []byte, pieces iter.Seq2[[]byte, error]) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, err := range pieces {
		if err != nil {
			return err
		}
		if err := json.Unmarshal(p, &s.value); err != nil {
			return err
		}
	}
	k, err := streaming.ParseKafkaOffset(cursor)
	if err != nil {
		return err
	}
	s.offset = k.Offset
	return nil
}

func appErrType(t *testing.T, err error) (string, bool) {
	t.Helper()
	var ae *temporal.ApplicationError
	require.True(t, errors.As(err, &ae), "want an application error, got %T: %v", err, err)
	return ae.Type(), ae.NonRetryable()
}

func TestFormatCursor(t *testing.T) {
	k := streaming.KafkaOffset{Topic: "t", Partition: 1, Offset: 9}
	assert.Equal(t, k.String(), activities.FormatCursor("kafka", k.Bytes()))
	assert.Equal(t, "x:0102", activities.FormatCursor("x", []byte{1, 2}))
	assert.Equal(t, "", activities.FormatCursor("kafka", nil))
}

// An MQTT shard's cursor is its dedup window and retained map: the
// status table, the coordinator's shard rows and each checkpoint's
// activity result showed kilobytes of hex of it.
func TestFormatCursorSummarisesAnMQTTCursor(t *testing.T) {
	c, err := streaming.NewMQTTCursor(0, 0)
	require.NoError(t, err)
	for i := range streaming.DefaultMQTTWindow + 10 {
		c.Observe(streaming.MQTTMessageID("site/a/s1", uint16(i%65535+1), []byte{byte(i), byte(i >> 8)}), uint16(i%65535+1))
	}
	c.ObserveRetained("site/a/s1", 1765050000000)
	c.ObserveRetained("site/a/s2", 1765050000123)
	c.ObserveRetained("site/a/s3", 1765049999000)
	b := c.Bytes()
	require.Greater(t, len(b), 8*streaming.DefaultMQTTWindow)

	got := activities.FormatCursor(streaming.CursorTypeMQTT, b)
	assert.Equal(t, "mqtt last-packet=1034 window=1024/1024 retained=3/4096 newest-ts=1765050000123", got)
	back, err := streaming.ParseMQTTCursor(b)
	require.NoError(t, err)
	assert.Equal(t, b, back.Bytes(), "formatting does not change the cursor")

	empty, err := streaming.NewMQTTCursor(0, 0)
	require.NoError(t, err)
	assert.Equal(t, "mqtt last-packet=0 window=0/1024 retained=0/4096", activities.FormatCursor(streaming.CursorTypeMQTT, empty.Bytes()))

	// A cursor FormatCursor cannot parse is hex, but not all of it.
	bad := append([]byte{'M', 9}, b[2:]...)
	got = activities.FormatCursor(streaming.CursorTypeMQTT, bad)
	assert.Less(t, len(got), 200, got)
	assert.True(t, strings.HasPrefix(got, "mqtt:4d09"), got)
	assert.Contains(t, got, fmt.Sprintf("(%d bytes, fnv ", len(bad)))
}
