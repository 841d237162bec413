package devstack

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tflo-io/tflo/internal/loopport"
)

// process is a child server process with its log in a file. The child
// runs in its own process group (a Ctrl-C at the terminal reaches the
// parent, which stops the child in order) and is killed if the parent
// dies (Pdeathsig, from the spawner's thread, which lives as long as the
// parent).
type process struct {
	name    string
	logPath string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	log  *os.File
	// logStart is the log's size when the running child started: what it
	// wrote begins there (the log is appended to across runs).
	logStart int64
}

func (p *process) start(bin string, args, env []string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		select {
		case <-p.done:
			// It exited on its own (a crash) and was never stopped: start
			// it again, as after stop.
			p.log.Close()
			p.cmd = nil
		default:
			return fmt.Errorf("devstack: %s already running (pid %d)", p.name, p.cmd.Process.Pid)
		}
	}
	logf, err := os.OpenFile(p.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("devstack: %s log: %w", p.name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	var logStart int64
	if st, err := logf.Stat(); err == nil {
		logStart = st.Size()
	}
	if err := onSpawnerThread(cmd.Start); err != nil {
		logf.Close()
		return fmt.Errorf("devstack: start %s (%s): %w", p.name, bin, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.done, p.log, p.logStart = cmd, done, logf, logStart
	return nil
}

// spawner is the goroutine that starts every child, locked to its OS
// thread for as long as the process lives. Pdeathsig is sent when the
// thread that started the child exits, not the process: started from the
// caller's goroutine, a child was killed when that goroutine was locked
// to its thread (runtime.LockOSThread) and ended, which ends the thread.
var spawner struct {
	once sync.Once
	reqs chan func()
}

// onSpawnerThread runs start on the spawner's thread and returns its
// error.
func onSpawnerThread(start func() error) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan func())
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the process
			for f := range spawner.reqs {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	spawner.reqs <- func() { errc <- start() }
	return <-errc
}

// exited returns a channel closed when the running child exits (nil when
// none runs).
func (p *process) exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// stop signals the child (SIGTERM for a clean stop, SIGKILL for a crash),
// waits up to grace, then kills it. Stopping a stopped process does
// nothing.
func (p *process) stop(sig syscall.Signal, grace time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.log.Close()
	p.cmd = nil
}

// listening is nil when the running child itself has a listening socket
// on the port of every one of addrs (host:port), as /proc shows it: the
// sockets the child holds against the kernel's listening TCP sockets. A
// server answering on the port is not enough: another server that took
// the port first answers while the child exits with "address already in
// use".
func (p *process) listening(addrs ...string) error {
	p.mu.Lock()
	pid := 0
	if p.cmd != nil && p.cmd.Process != nil {
		pid = p.cmd.Process.Pid
	}
	p.mu.Unlock()
	if pid == 0 {
		return fmt.Errorf("%s is not running", p.name)
	}
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return fmt.Errorf("%s (pid %d): its sockets: %w", p.name, pid, err)
	}
	own := map[string]bool{} // socket inodes the child holds
	for _, fd := range fds {
		if l, err := os.Readlink(filepath.Join(fdDir, fd.Name())); err == nil && strings.HasPrefix(l, "socket:[") {
			own[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	ports := map[int]bool{} // ports the child listens on
	for _, table := range []string{"tcp", "tcp6"} {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue // no IPv6
		}
		// sl local_address rem_address st ... inode: local_address is
		// HEXADDR:HEXPORT, st 0A is LISTEN.
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" || !own[f[9]] {
				continue
			}
			if i := strings.LastIndexByte(f[1], ':'); i >= 0 {
				if port, err := strconv.ParseInt(f[1][i+1:], 16, 32); err == nil {
					ports[int(port)] = true
				}
			}
		}
	}
	for _, a := range addrs {
		_, ps, err := net.SplitHostPort(a)
		if err != nil {
			return fmt.Errorf("%s: address %q: %w", p.name, a, err)
		}
		port, err := strconv.Atoi(ps)
		if err != nil {
			return fmt.Errorf("%s: address %q: %w", p.name, a, err)
		}
		if !ports[port] {
			return fmt.Errorf("%s (pid %d) does not listen on %s (yet, or another server holds the port)", p.name, pid, a)
		}
	}
	return nil
}

// logTail returns about the last n bytes of the log.
func (p *process) logTail(n int64) string { return p.logTailFrom(n, 0) }

// runLogTail is logTail of what the running (or last) child wrote, not
// earlier runs.
func (p *process) runLogTail(n int64) string {
	p.mu.Lock()
	from := p.logStart
	p.mu.Unlock()
	return p.logTailFrom(n, from)
}

// logTailFrom returns about the last n bytes of the log from offset from
// on.
func (p *process) logTailFrom(n, from int64) string {
	f, err := os.Open(p.logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil {
		if off := max(st.Size()-n, from); off > 0 {
			_, _ = f.Seek(off, io.SeekStart)
		}
	}
	var b strings.Builder
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		b.WriteString(sc.Text())
		b.WriteByte('\n')
	}
	return b.String()
}

// errExitedAtStart: the child exited before it was ready.
var errExitedAtStart = errors.New("exited during start-up")

// portTaken reports whether err is a child's exit at start-up because a
// port it was given was taken (its log says so): worth starting again on
// new ports. A child that did not exit (a timeout) is not retried, even
// when an earlier run's lines in its log mention a taken port.
func portTaken(err error) bool {
	return errors.Is(err, errExitedAtStart) && loopport.InUse(err.Error())
}

// waitReady polls ready every interval until it returns nil, the child
// exits, ctx ends (Ctrl-C during start-up: the child is in its own
// process group, so the terminal's interrupt does not reach it) or
// timeout passes.
func (p *process) waitReady(ctx context.Context, timeout, interval time.Duration, ready func() error) error {
	exited := p.exited()
	deadline := time.Now().Add(timeout)
	for {
		err := ready()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return fmt.Errorf("devstack: %s: start-up interrupted: %w", p.name, ctx.Err())
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("devstack: %s not ready after %v: %w; log tail:\n%s", p.name, timeout, err, p.logTail(2048))
		}
		select {
		case <-exited:
			// Its own lines only: an earlier run's "address already in
			// use" must not make this exit look like a taken port.
			return fmt.Errorf("devstack: %s %w: %w", p.name, errExitedAtStart, errors.Join(err, errors.New(p.runLogTail(2048))))
		case <-ctx.Done():
		case <-time.After(interval):
		}
	}
}
