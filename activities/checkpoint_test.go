package activities_test

import (
	"context"
	"encoding/json"
	"errors"
	"iter"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
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

func setup(t *testing.T, epoch *atomic.Uint64) (*testsuite.TestActivityEnvironment, *counterSource) {
	t.Helper()
	src := &counterSource{}
	store := memory.New()
	cp, err := streaming.NewCheckpointer("iot-portal/readings-3", src, store, store,
		streaming.WithOwnership(streaming.OwnershipFunc(func() (streaming.Epoch, bool) {
			return streaming.Epoch(epoch.Load()), true
		})))
	require.NoError(t, err)
	shards := activities.NewShards()
	shards.Register("iot-portal", "readings-3", cp)
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(activities.NewCheckpoints(shards))
	return env, src
}

func appErrType(t *testing.T, err error) (string, bool) {
	t.Helper()
	var ae *temporal.ApplicationError
	require.True(t, errors.As(err, &ae), "want an application error, got %T: %v", err, err)
	return ae.Type(), ae.NonRetryable()
}

func TestCheckpointStagesInOrder(t *testing.T) {
	var epoch atomic.Uint64
	epoch.Store(5)
	env, src := setup(t, &epoch)
	var a *activities.Checkpoints
	ref := activities.ShardRef{Pipeline: "iot-portal", Shard: "readings-3", Epoch: 5}
	for range 42 {
		src.apply(2)
	}

	v, err := env.ExecuteActivity(a.Snapshot, ref)
	require.NoError(t, err)
	var snap activities.SnapshotResult
	require.NoError(t, v.Get(&snap))
	assert.NotZero(t, snap.CheckpointID)
	assert.Contains(t, snap.Cursor, "readings")
	assert.Contains(t, snap.Cursor, "42")

	stage := activities.StageInput{ShardRef: ref, CheckpointID: snap.CheckpointID}
	_, err = env.ExecuteActivity(a.CommitCursor, stage)
	require.Error(t, err, "a cursor commit before the state save must be refused")
	typ, nonRetryable := appErrType(t, err)
	assert.Equal(t, activities.ErrTypeOutOfOrder, typ)
	assert.True(t, nonRetryable)

	v, err = env.ExecuteActivity(a.SaveState, stage)
	require.NoError(t, err)
	var saved activities.SaveResult
	require.NoError(t, v.Get(&saved))
	assert.Positive(t, saved.Bytes)

	v, err = env.ExecuteActivity(a.CommitCursor, stage)
	require.NoError(t, err)
	var committed activities.CommitResult
	require.NoError(t, v.Get(&committed))
	assert.NotEmpty(t, committed.Cursor)
}

func TestCheckpointStagesRefuseOtherEpochsAndShards(t *testing.T) {
	var epoch atomic.Uint64
	epoch.Store(7)
	env, _ := setup(t, &epoch)
	var a *activities.Checkpoints

	_, err := env.ExecuteActivity(a.Snapshot, activities.ShardRef{Pipeline: "iot-portal", Shard: "readings-3", Epoch: 6})
	require.Error(t, err, "a snapshot scheduled for an older epoch is a zombie's")
	typ, nonRetryable := appErrType(t, err)
	assert.Equal(t, activities.ErrTypeNotOwner, typ)
	assert.True(t, nonRetryable)

	_, err = env.ExecuteActivity(a.Snapshot, activities.ShardRef{Pipeline: "iot-portal", Shard: "readings-9", Epoch: 7})
	require.Error(t, err)
	typ, _ = appErrType(t, err)
	assert.Equal(t, activities.ErrTypeNotOwner, typ)
	assert.Contains(t, err.Error(), "readings-9")
}

func TestFormatCursor(t *testing.T) {
	k := streaming.KafkaOffset{Topic: "t", Partition: 1, Offset: 9}
	assert.Equal(t, k.String(), activities.FormatCursor("kafka", k.Bytes()))
	assert.Equal(t, "x:0102", activities.FormatCursor("x", []byte{1, 2}))
	assert.Equal(t, "", activities.FormatCursor("kafka", nil))
}
