package devstack

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
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
	err := taken.waitReady(context.Background(), time.Minute, 10*time.Millisecond, notReady)
	require.ErrorContains(t, err, "child exited during start-up")
	require.True(t, portTaken(err), "%v", err)
	taken.stop(syscall.SIGKILL, time.Second)

	other := process{name: "child", logPath: filepath.Join(t.TempDir(), "other.log")}
	require.NoError(t, other.start("/bin/sh", []string{"-c", "echo 'no such database'; exit 1"}, nil))
	err = other.waitReady(context.Background(), time.Minute, 10*time.Millisecond, notReady)
	require.ErrorContains(t, err, "no such database")
	require.False(t, portTaken(err), "%v", err)
	other.stop(syscall.SIGKILL, time.Second)

	// An exit for another reason after a run that found its port taken,
	// on the same log (a start retried on new ports): not a taken port.
	// Bug: the exit's log tail was the file's, with the earlier run's line.
	again := process{name: "child", logPath: log}
	require.NoError(t, again.start("/bin/sh", []string{"-c", "echo 'no such database'; exit 1"}, nil))
	err = again.waitReady(context.Background(), time.Minute, 10*time.Millisecond, notReady)
	require.ErrorContains(t, err, "no such database")
	require.False(t, portTaken(err), "an earlier run's line made this exit a taken port: %v", err)
	again.stop(syscall.SIGKILL, time.Second)

	slow := process{name: "child", logPath: log} // the first child's log
	require.NoError(t, slow.start("/bin/sh", []string{"-c", "exec sleep 30"}, nil))
	defer slow.stop(syscall.SIGKILL, time.Second)
	err = slow.waitReady(context.Background(), 100*time.Millisecond, 10*time.Millisecond, notReady)
	require.ErrorContains(t, err, "address already in use", "the log tail carries the earlier run's line")
	require.False(t, portTaken(err), "a timeout is not retried: %v", err)
}

// TestStartInfluxHonoursCancel: a start-up whose context ends (Ctrl-C
// while `starter demo` starts its servers) returns at once and stops the
// child. Bug: waitReady took the context's error for "not ready yet" and
// polled on until the start timeout (60 s for influxd, 90 s for Temporal),
// the child being out of reach of the terminal's interrupt.
func TestStartInfluxHonoursCancel(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "influxd")
	require.NoError(t, os.WriteFile(fake, []byte("#!/bin/sh\nexec sleep 300\n"), 0o755))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() {
		s, err := StartInflux(ctx, InfluxOptions{Dir: filepath.Join(dir, "data"), Bin: fake})
		if s != nil {
			s.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(InfluxStartTimeout / 2):
		t.Fatalf("StartInflux with a cancelled context still waits after %v", InfluxStartTimeout/2)
	}
}

// TestRestartAfterTheChildExitedOnItsOwn: a child that exited by itself
// (a crash, not a stop) is started again. Bug: start still held the
// exited child and refused with "already running".
func TestRestartAfterTheChildExitedOnItsOwn(t *testing.T) {
	p := process{name: "child", logPath: filepath.Join(t.TempDir(), "child.log")}
	require.NoError(t, p.start("/bin/sh", []string{"-c", "exit 3"}, nil))
	select {
	case <-p.exited():
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not exit within 30s")
	}
	require.NoError(t, p.start("/bin/sh", []string{"-c", "exec sleep 30"}, nil), "the crashed child is started again")
	defer p.stop(syscall.SIGKILL, time.Second)
	err := p.start("/bin/sh", []string{"-c", "exec sleep 30"}, nil)
	require.ErrorContains(t, err, "child already running (pid", "a running child is not started twice")
}

// TestChildOutlivesTheThreadThatStartedIt: a child is killed when its
// parent dies (Pdeathsig), but Linux sends that signal when the thread
// that started the child exits. Bug: the child was started on the
// caller's thread, so a caller locked to its thread (runtime.LockOSThread)
// that ended took its children with it while the parent lived on.
func TestChildOutlivesTheThreadThatStartedIt(t *testing.T) {
	p := process{name: "child", logPath: filepath.Join(t.TempDir(), "child.log")}
	tid, errc := make(chan int, 1), make(chan error, 1)
	var startLocked func()
	startLocked = func() {
		runtime.LockOSThread() // never unlocked: the thread exits with this goroutine
		if syscall.Gettid() == syscall.Getpid() {
			// The runtime does not end the main thread: hold it, so that
			// another goroutine runs on another thread.
			done := make(chan struct{})
			go func() { startLocked(); close(done) }()
			<-done
			runtime.UnlockOSThread()
			return
		}
		tid <- syscall.Gettid()
		errc <- p.start("/bin/sh", []string{"-c", "exec sleep 300"}, nil)
	}
	go startLocked()
	thread := fmt.Sprintf("/proc/self/task/%d", <-tid)
	require.NoError(t, <-errc)
	defer p.stop(syscall.SIGKILL, time.Second)
	pid := p.cmd.Process.Pid

	// Once the thread is gone from /proc, a death signal it would send
	// has been sent (the kernel signals the children before it unhashes
	// the thread).
	require.Eventually(t, func() bool {
		_, err := os.Stat(thread)
		return errors.Is(err, fs.ErrNotExist)
	}, 10*time.Second, time.Millisecond, "the goroutine's thread did not exit")

	// So the child is now either running with no SIGKILL pending, or
	// dying: SIGKILL pending, exiting, a zombie or reaped.
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err, "the child (pid %d) is gone", pid)
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			require.NotRegexp(t, `^[ZX]`, v, "the child (pid %d) exited", pid)
		case "SigPnd", "ShdPnd":
			mask, err := strconv.ParseUint(v, 16, 64)
			require.NoError(t, err, "%s of pid %d: %q", k, pid, v)
			require.Zero(t, mask&(1<<(syscall.SIGKILL-1)), "the child (pid %d) was sent SIGKILL (%s %s)", pid, k, v)
		}
	}
	select {
	case <-p.exited():
		t.Fatalf("the child (pid %d) exited; log:\n%s", pid, p.logTail(2048))
	default:
	}
}
