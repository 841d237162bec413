package metered

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/coordination/memstore"
)

// lateStore answers Create whatever its context, like a backend whose
// write landed as the deadline passed.
type lateStore struct{ coordination.Store }

func (s lateStore) Create(_ context.Context, ks coordination.Keyspace, key string, value []byte) (coordination.CasOutcome, error) {
	return s.Store.Create(context.Background(), ks, key, value)
}

// TestAnswerAtTheDeadlineIsNotATimeout: a call whose answer and deadline
// are both in when the wrapper looks was reported, at random, as timed
// out, so a won Create came back Retryable and its retry lost to itself.
func TestAnswerAtTheDeadlineIsNotATimeout(t *testing.T) {
	inner, err := memstore.New()
	require.NoError(t, err)
	s, err := New(lateStore{inner}, WithTimeout(time.Millisecond))
	require.NoError(t, err)
	// Hold the wrapper back until both the answer and the deadline are in.
	testHookBeforeSelect = func(done <-chan struct{}, answered func() bool) {
		<-done
		require.Eventually(t, answered, 5*time.Second, 100*time.Microsecond)
	}
	t.Cleanup(func() { testHookBeforeSelect = nil })

	for i := range 50 {
		key := fmt.Sprintf("k%d", i)
		o, err := s.Create(context.Background(), coordination.Durable, key, []byte("v"))
		require.NoError(t, err, "create %d", i)
		require.True(t, o.Won(), "create %d", i)
	}
}

// absentStore answers Get with not-found whatever its context.
type absentStore struct{ coordination.Store }

func (s absentStore) Get(_ context.Context, ks coordination.Keyspace, key string) (coordination.Entry, error) {
	return coordination.Entry{}, coordination.NotFound(ks, key)
}

// TestNotFoundAtTheDeadlineStaysNotFound: a Get answered "not found" as
// its deadline passed came back Retryable (a timeout wrapping the
// answer), where the contract says not-found is neither retryable nor
// fatal.
func TestNotFoundAtTheDeadlineStaysNotFound(t *testing.T) {
	inner, err := memstore.New()
	require.NoError(t, err)
	s, err := New(absentStore{inner}, WithTimeout(time.Millisecond))
	require.NoError(t, err)
	testHookBeforeSelect = func(done <-chan struct{}, answered func() bool) {
		<-done
		require.Eventually(t, answered, 5*time.Second, 100*time.Microsecond)
	}
	t.Cleanup(func() { testHookBeforeSelect = nil })

	_, err = s.Get(context.Background(), coordination.Durable, "k")
	require.ErrorIs(t, err, coordination.ErrNotFound)
	require.False(t, coordination.IsRetryable(err) || coordination.IsFatal(err), "%v", err)
}
