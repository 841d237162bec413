package devstack

import (
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPortTakenOnlyWhenTheChildExited: a child that exits at start-up
// saying its port is taken is started again (on new ports); one that
// times out is not, even when its log (appended to across runs) holds an
// earlier run's "address already in use".
func TestPortTakenOnlyWhenTheChildExited(t *testing.T) {
	notReady := func() error { return errors.New("not answering") }
	log := filepath.Join(t.TempDir(), "child.log")

	taken := process{name: "child", logPath: log}
	require.NoError(t, taken.start("/bin/sh", []string{"-c", "echo 'listen tcp 127.0.0.1:39377: bind: address already in use'; exit 1"}, nil))
	err := taken.waitReady(time.Minute, 10*time.Millisecond, notReady)
	require.ErrorContains(t, err, "child exited during start-up")
	require.True(t, portTaken(err), "%v", err)
	taken.stop(syscall.SIGKILL, time.Second)

	other := process{name: "child", logPath: filepath.Join(t.TempDir(), "other.log")}
	require.NoError(t, other.start("/bin/sh", []string{"-c", "echo 'no such database'; exit 1"}, nil))
	err = other.waitReady(time.Minute, 10*time.Millisecond, notReady)
	require.ErrorContains(t, err, "no such database")
	require.False(t, portTaken(err), "%v", err)
	other.stop(syscall.SIGKILL, time.Second)

	slow := process{name: "child", logPath: log} // the first child's log
	require.NoError(t, slow.start("/bin/sh", []string{"-c", "exec sleep 30"}, nil))
	defer slow.stop(syscall.SIGKILL, time.Second)
	err = slow.waitReady(100*time.Millisecond, 10*time.Millisecond, notReady)
	require.ErrorContains(t, err, "address already in use", "the log tail carries the earlier run's line")
	require.False(t, portTaken(err), "a timeout is not retried: %v", err)
}
