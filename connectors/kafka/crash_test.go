package kafka

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/files"
	"github.com/twmb/franz-go/pkg/kgo"
)

const (
	envChildBrokers = "TFLO_KAFKA_TEST_CHILD_BROKERS"
	envChildDir     = "TFLO_KAFKA_TEST_CHILD_DIR"
)

// TestChildMember is not a test on its own: TestMemberSIGKILLed runs the
// test binary again with this test selected, as a group member in another
// process that it then kills. It reports every applied record on stdout.
func TestChildMember(t *testing.T) {
	brokers := os.Getenv(envChildBrokers)
	if brokers == "" {
		t.Skip("child process of TestMemberSIGKILLed")
	}
	store, err := files.Open(os.Getenv(envChildDir))
	require.NoError(t, err)
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	src, err := NewSource(WithBrokers(strings.Split(brokers, ",")...), WithGroup("central"), WithTopics("readings"),
		WithGraph(seqGraph(t)), WithStateStore(store), WithCheckpointInterval(25*time.Millisecond),
		WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))),
		WithClientOptions(kgo.SessionTimeout(2*time.Second), kgo.HeartbeatInterval(100*time.Millisecond)),
		WithOnApply(func(a *Applied) {
			v, _ := a.Instance.Value("value")
			mu.Lock()
			fmt.Fprintf(out, "EV %s %d %d\n", a.Key, v.Int64(), a.Epoch)
			out.Flush()
			mu.Unlock()
		}))
	require.NoError(t, err)
	go func() { // report completed checkpoints
		var last uint64
		for range time.Tick(5 * time.Millisecond) {
			if n := src.Stats().Checkpoints; n > last {
				last = n
				mu.Lock()
				fmt.Fprintf(out, "CK %d\n", n)
				out.Flush()
				mu.Unlock()
			}
		}
	}()
	require.NoError(t, src.Run(context.Background())) // until killed
}

// TestMemberSIGKILLed: a member in another process is killed with SIGKILL
// mid-stream (no revoke, no final checkpoint, no LeaveGroup). A new member
// waits out the dead one's session, restores its last periodic checkpoint
// from the shared folder store and replays the rest; the durable state
// ends exact and no key was applied by two members in one epoch.
func TestMemberSIGKILLed(t *testing.T) {
	if os.Getenv(envChildBrokers) != "" {
		t.Skip("in the child")
	}
	const parts, per = 3, 100
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	keys := sensorKeys(6)
	g := seqGraph(t)
	dir := t.TempDir()
	j := &journal{}

	produceReadings(t, addrs, keys, 1, per)
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildMember$", "-test.count=1")
	cmd.Env = append(os.Environ(), envChildBrokers+"="+strings.Join(addrs, ","), envChildDir+"="+dir)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	killed := false
	defer func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	var checkpoints atomic.Int64 // partition checkpoints the child completed
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) == 2 && f[0] == "CK" {
				n, _ := strconv.ParseInt(f[1], 10, 64)
				checkpoints.Store(n)
				continue
			}
			if len(f) != 4 || f[0] != "EV" {
				continue
			}
			seq, _ := strconv.ParseInt(f[2], 10, 64)
			ep, _ := strconv.ParseUint(f[3], 10, 64)
			j.mu.Lock()
			j.events = append(j.events, event{member: "victim", key: f[1], seq: seq, epoch: streaming.Epoch(ep)})
			j.mu.Unlock()
		}
	}()
	require.Eventually(t, func() bool { return j.allReached(keys, per) }, 30*time.Second, 5*time.Millisecond)
	// Two more rounds of periodic checkpoints: one of them cut after the
	// first batch was applied, so the victim dies with state to hand over.
	ck := checkpoints.Load()
	require.Eventually(t, func() bool { return checkpoints.Load() >= ck+2*parts }, 30*time.Second, 5*time.Millisecond)
	produceReadings(t, addrs, keys, per+1, 2*per)
	// Kill it in the middle of the second batch.
	require.Eventually(t, func() bool {
		m := j.maxSeq()
		for _, k := range keys {
			if m[k] > per+per/2 {
				return true
			}
		}
		return false
	}, 30*time.Second, time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	killed = true
	_ = cmd.Wait()
	<-read
	victimApplied := len(j.events)

	store, err := files.Open(dir) // the dead process's folder lock is gone
	require.NoError(t, err)
	defer store.Close()
	survivor := startMember(t, "survivor", memberOpts(addrs, g, store, j, "survivor")...)
	require.Eventually(t, func() bool { return j.allReached(keys, 2*per) }, 60*time.Second, 10*time.Millisecond)
	produceReadings(t, addrs, keys, 2*per+1, 3*per)
	total := 3 * per
	require.Eventually(t, func() bool { return j.allReached(keys, total) }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, uint64(parts), survivor.src.Stats().RestoredDurable, "the survivor did not restore the victim's checkpoints")
	survivor.stop(t)
	j.requireOneOwnerPerEpoch(t)

	state := durableState(t, store, g, "central", parts)
	require.Len(t, state, len(keys))
	for _, k := range keys {
		require.Equal(t, int64(total), state[k].count, "key %s", k)
		require.Zero(t, state[k].violations, "key %s", k)
	}
	t.Logf("victim applied %d records before SIGKILL; %d applied in all (replayed %d)",
		victimApplied, len(j.events), len(j.events)-total*len(keys))
}
