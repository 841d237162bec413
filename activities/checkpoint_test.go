package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
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
