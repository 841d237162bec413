//go:build unix

package files

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

// TestLoadDoesNotReadTheKeyAfterReturning: a Load or LoadCursor whose
// caller gave up while its read was stalled (here: the file is a FIFO no
// one writes yet) must not read the caller's key slice after returning,
// as the StateStore contract says; the caller may reuse it. Bug: the
// read compared the file's key with the caller's slice when it resumed,
// a data race the race detector reports.
func TestLoadDoesNotReadTheKeyAfterReturning(t *testing.T) {
	for _, k := range []kind{kindSnapshot, kindCursor} {
		t.Run(k.String(), func(t *testing.T) {
			s, err := Open(t.TempDir(), WithIOWorkers(1))
			require.NoError(t, err)
			defer s.Close()
			key := []byte("shard/manifest")
			fifo := filepath.Join(s.Dir(), fileName(k, key))
			require.NoError(t, syscall.Mkfifo(fifo, 0o600))

			ctx, cancel := context.WithCancel(context.Background())
			returned := make(chan error, 1)
			go func() {
				var err error
				if k == kindSnapshot {
					_, err = s.Load(ctx, key)
				} else {
					_, err = s.LoadCursor(ctx, key)
				}
				returned <- err
			}()
			// Opening a FIFO for writing waits for its reader: the read
			// has started once this returns.
			w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
			require.NoError(t, err)
			cancel()
			require.ErrorIs(t, <-returned, context.Canceled)

			copy(key, "other/manifest") // the caller reuses its slice
			var content []byte
			if k == kindSnapshot {
				content = encodeSnapshotFile([]byte("shard/manifest"), streaming.Snapshot{Data: []byte("v")})
			} else {
				content = append(appendKeyHeader(nil, []byte("shard/manifest")), streaming.MarshalCursorRecord(streaming.CursorRecord{Epoch: 1})...)
			}
			_, err = w.Write(content)
			require.NoError(t, err)
			require.NoError(t, w.Close())
			require.NoError(t, s.Close()) // waits for the read to end
		})
	}
}
