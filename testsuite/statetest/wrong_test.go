package statetest_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/statetest"
)

// sharingStore is a deliberately wrong store: it copies what it is given
// but hands a Load the Cursor and Operators it keeps (copying only Data),
// and a LoadCursor the cursor bytes it keeps, so a caller that edits
// what it loaded edits the store.
type sharingStore struct {
	mu      sync.Mutex
	snaps   map[string]streaming.Snapshot
	cursors map[string]streaming.CursorRecord
}

func newSharingStore() *sharingStore {
	return &sharingStore{snaps: map[string]streaming.Snapshot{}, cursors: map[string]streaming.CursorRecord{}}
}

func (s *sharingStore) Save(ctx context.Context, key []byte, snap streaming.Snapshot) error {
	return s.SaveBatch(ctx, []streaming.KeyedSnapshot{{Key: key, Snapshot: snap}})
}

func (s *sharingStore) SaveBatch(ctx context.Context, items []streaming.KeyedSnapshot) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, it := range items {
		snap := it.Snapshot
		snap.Meta.FormatVersion = streaming.SnapshotFormatVersion
		snap.Data = slices.Clone(snap.Data)
		snap.Meta.Cursor = slices.Clone(snap.Meta.Cursor)
		snap.Meta.Operators = slices.Clone(snap.Meta.Operators)
		s.snaps[string(it.Key)] = snap
	}
	return nil
}

func (s *sharingStore) Load(ctx context.Context, key []byte) (streaming.Snapshot, error) {
	if err := ctx.Err(); err != nil {
		return streaming.Snapshot{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	snap, ok := s.snaps[string(key)]
	if !ok {
		return streaming.Snapshot{}, fmt.Errorf("key %q: %w", key, streaming.ErrNotFound)
	}
	snap.Data = slices.Clone(snap.Data) // the wrong part: Cursor and Operators are shared
	return snap, nil
}

func (s *sharingStore) ListKeys(ctx context.Context) ([][]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var keys [][]byte
	for k := range s.snaps {
		keys = append(keys, []byte(k))
	}
	return keys, nil
}

func (s *sharingStore) Delete(ctx context.Context, key []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.snaps, string(key))
	return nil
}

func (s *sharingStore) SaveCursor(ctx context.Context, key []byte, rec streaming.CursorRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old, ok := s.cursors[string(key)]; ok {
		if err := streaming.CheckCursorFence(key, old, rec); err != nil {
			return err
		}
	}
	rec.Cursor = slices.Clone(rec.Cursor)
	s.cursors[string(key)] = rec
	return nil
}

func (s *sharingStore) LoadCursor(ctx context.Context, key []byte) (streaming.CursorRecord, error) {
	if err := ctx.Err(); err != nil {
		return streaming.CursorRecord{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.cursors[string(key)]
	if !ok {
		return streaming.CursorRecord{}, fmt.Errorf("cursor key %q: %w", key, streaming.ErrNotFound)
	}
	return rec, nil // the wrong part: the stored cursor bytes are shared
}

const wrongStoreEnv = "STATETEST_WRONG_STORE_CHILD"

// TestWrongStoreChild runs the suites against sharingStore; only
// TestSuitesCatchAStoreSharingWhatItLoads runs it, expecting it to fail.
func TestWrongStoreChild(t *testing.T) {
	if os.Getenv(wrongStoreEnv) != "1" {
		t.Skip("run by TestSuitesCatchAStoreSharingWhatItLoads")
	}
	t.Run("State", func(t *testing.T) {
		statetest.Run(t, func(*testing.T) streaming.StateStore { return newSharingStore() })
	})
	t.Run("Cursor", func(t *testing.T) {
		statetest.RunCursorStore(t, func(*testing.T) streaming.CursorStore { return newSharingStore() })
	})
}

// TestSuitesCatchAStoreSharingWhatItLoads: the suites held Load to not
// sharing Data only, and LoadCursor to nothing, so a store handing out
// the Cursor and Operators it keeps passed them. The suites must fail
// that store exactly where it is wrong.
func TestSuitesCatchAStoreSharingWhatItLoads(t *testing.T) {
	if os.Getenv(wrongStoreEnv) == "1" {
		t.Skip("the child")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestWrongStoreChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), wrongStoreEnv+"=1")
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the suites passed a store that shares what it loads:\n%s", out)
	failed := regexp.MustCompile(`--- FAIL: (TestWrongStoreChild/\w+/\w+)`).FindAllStringSubmatch(string(out), -1)
	var names []string
	for _, m := range failed {
		names = append(names, m[1])
	}
	// Exactly where the store is wrong, and nowhere else.
	require.ElementsMatch(t, []string{"TestWrongStoreChild/State/NoAliasing", "TestWrongStoreChild/Cursor/RoundTrip"}, names, "%s", out)
}
