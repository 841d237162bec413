package files_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/files"
)

const crashDirEnv = "TFLO_FILES_CRASH_DIR"

// crashSnapshot is round r's snapshot of key i: its size and every byte
// depend on r, so a torn or mixed file cannot pass for a whole one.
func crashSnapshot(i, r int) streaming.Snapshot {
	return streaming.Snapshot{
		Meta: streaming.SnapshotMeta{Epoch: streaming.Epoch(r)},
		Data: bytes.Repeat([]byte{byte(r)}, 20_000+r*97%5000+i),
	}
}

// TestCrashChild is the process the crash test kills: it rewrites the same
// keys round after round, in batches (the syncfs path) and one by one,
// until it is killed. It does nothing unless started by
// TestKilledWriterLeavesNoTornSnapshot.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("only runs as the child of TestKilledWriterLeavesNoTornSnapshot")
	}
	s, err := files.Open(dir)
	require.NoError(t, err)
	ctx := context.Background()
	for r := 1; ; r++ {
		var items []streaming.KeyedSnapshot
		for i := range 100 {
			items = append(items, streaming.KeyedSnapshot{Key: fmt.Appendf(nil, "batch/%d", i), Snapshot: crashSnapshot(i, r)})
		}
		require.NoError(t, s.SaveBatch(ctx, items))
		for i := range 5 {
			require.NoError(t, s.Save(ctx, fmt.Appendf(nil, "single/%d", i), crashSnapshot(i, r)))
		}
		require.NoError(t, s.SaveCursor(ctx, []byte("cursor"), streaming.CursorRecord{Type: "kafka", Cursor: fmt.Appendf(nil, "r%d", r), Epoch: streaming.Epoch(r)}))
		require.NoError(t, os.WriteFile(dir+".round", fmt.Append(nil, r), 0o600))
	}
}

// A writer killed (SIGKILL) at an arbitrary moment leaves only whole
// snapshots visible: every key loads, and each holds one complete round.
func TestKilledWriterLeavesNoTornSnapshot(t *testing.T) {
	if testing.Short() {
		t.Skip("starts and kills child processes")
	}
	for attempt := range 3 {
		dir := t.TempDir() + "/store"
		cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$")
		cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
		require.NoError(t, cmd.Start())
		// Let it get a few rounds in, then kill it mid-write.
		require.Eventually(t, func() bool {
			b, err := os.ReadFile(dir + ".round")
			r, perr := strconv.Atoi(string(b))
			return err == nil && perr == nil && r >= 2+attempt
		}, 60*time.Second, time.Millisecond, "child made no progress")
		require.NoError(t, cmd.Process.Kill())
		_ = cmd.Wait()

		s, err := files.Open(dir)
		require.NoError(t, err, "attempt %d: reopen after kill", attempt)
		ctx := context.Background()
		keys, err := s.ListKeys(ctx)
		require.NoError(t, err)
		require.Len(t, keys, 105, "attempt %d", attempt)
		for _, k := range keys {
			snap, err := s.Load(ctx, k)
			require.NoError(t, err, "attempt %d: key %q", attempt, k)
			var i int
			_, err = fmt.Sscanf(string(k[strings.IndexByte(string(k), '/')+1:]), "%d", &i)
			require.NoError(t, err)
			want := crashSnapshot(i, int(snap.Meta.Epoch))
			require.True(t, bytes.Equal(want.Data, snap.Data), "attempt %d: key %q holds a mixed or torn round %d", attempt, k, snap.Meta.Epoch)
		}
		rec, err := s.LoadCursor(ctx, []byte("cursor"))
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("r%d", rec.Epoch), string(rec.Cursor))
		entries, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range entries {
			require.False(t, strings.HasPrefix(e.Name(), ".tmp-"), "Open removed the killed writer's temporary files")
		}
		require.NoError(t, s.Close())
	}
}
