package pipeline_test

import (
	"bufio"
	"context"
	"fmt"
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
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/files"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/faults"
)

const (
	envChildBrokers = "TFLO_PIPELINE_TEST_CHILD_BROKERS"
	envChildDir     = "TFLO_PIPELINE_TEST_CHILD_DIR"
)

// stdoutSink reports every output on stdout ("EV key seq count epoch")
// and every completed checkpoint ("CK n").
type stdoutSink struct {
	mu  sync.Mutex
	out *bufio.Writer
	n   atomic.Int64
	// preCommits also reports every pre-commit ("PC shard"), after the
	// sinks before this one pre-committed.
	preCommits bool
}

func (s *stdoutSink) Write(_ context.Context, outs []streaming.Output) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range outs {
		fmt.Fprintf(s.out, "EV %s %d %v %d %d\n", o.Key, o.TS/1e6-1_700_000_000_000, o.Value, o.Mode, o.Epoch)
	}
	return s.out.Flush()
}

func (s *stdoutSink) Flush(_ context.Context, shard streaming.ShardID, _ streaming.CheckpointID) error {
	if !s.preCommits {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.out, "PC %s\n", shard)
	return s.out.Flush()
}
func (s *stdoutSink) Close(context.Context) error { return nil }

func (s *stdoutSink) Commit(context.Context, streaming.ShardID, streaming.CheckpointID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Fprintf(s.out, "CK %d\n", s.n.Add(1))
	return s.out.Flush()
}

// TestChildWorker is not a test on its own: TestWorkerSIGKILLed runs the
// test binary again with this test selected, as a worker in another
// process that it then kills.
func TestChildWorker(t *testing.T) {
	brokers := os.Getenv(envChildBrokers)
	if brokers == "" {
		t.Skip("child process of TestWorkerSIGKILLed")
	}
	store, err := files.Open(os.Getenv(envChildDir))
	require.NoError(t, err)
	p := seqPipeline(strings.Split(brokers, ","), store, pipeline.Use(&stdoutSink{out: bufio.NewWriter(os.Stdout)}))
	src := p.Source.(pipeline.KafkaSource)
	src.SessionTimeout = 2 * time.Second
	p.Source = src
	p.Checkpoint.Interval = 25 * time.Millisecond
	require.NoError(t, pipeline.Run(context.Background(), p, pipeline.WithOperators(seqRegistry(t)))) // until killed
}

// TestWorkerSIGKILLed: a worker in another process is killed with SIGKILL
// mid-stream (no revoke, no final checkpoint, no LeaveGroup). A new worker
// waits out the dead one's session, restores its last periodic
// checkpoints from the shared folder store and replays the rest: every
// key's state counts each record once, and no key was applied by two
// workers in one epoch.
func TestWorkerSIGKILLed(t *testing.T) {
	if os.Getenv(envChildBrokers) != "" {
		t.Skip("in the child")
	}
	const parts, per = 3, 100
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	keys := sensorKeys(6)
	dir := t.TempDir()
	j := newJournal()

	produceSeq(t, addrs, keys, 1, per)
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildWorker$", "-test.count=1")
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
	var checkpoints atomic.Int64
	read := make(chan struct{})
	victim := journalView{j, "victim"}
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
			if len(f) != 6 || f[0] != "EV" {
				continue
			}
			seq, _ := strconv.ParseInt(f[2], 10, 64)
			count, _ := strconv.ParseFloat(f[3], 64)
			mode, _ := strconv.Atoi(f[4])
			ep, _ := strconv.ParseUint(f[5], 10, 64)
			_ = victim.Write(context.Background(), []streaming.Output{{Key: f[1], TS: (1_700_000_000_000 + seq) * 1e6, Value: count, Mode: streaming.Mode(mode), Epoch: streaming.Epoch(ep)}})
		}
	}()
	require.Eventually(t, func() bool { return j.allReached(keys, per) }, 30*time.Second, 5*time.Millisecond)
	// Two more rounds of periodic checkpoints: one of them cut after the
	// first batch was applied, so the victim dies with state to hand over.
	ck := checkpoints.Load()
	require.Eventually(t, func() bool { return checkpoints.Load() >= ck+2*parts }, 30*time.Second, 5*time.Millisecond)
	produceSeq(t, addrs, keys, per+1, 2*per)
	require.Eventually(t, func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		for _, k := range keys {
			if j.highest[k] > per+per/2 {
				return true
			}
		}
		return false
	}, 30*time.Second, time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	killed = true
	_ = cmd.Wait()
	<-read

	store, err := files.Open(dir) // the dead process's folder lock is gone
	require.NoError(t, err)
	defer store.Close()
	survivor := start(t, seqPipeline(addrs, store, j.as("survivor")), pipeline.WithOperators(seqRegistry(t)))
	require.Eventually(t, func() bool { return j.allReached(keys, 2*per) }, 60*time.Second, 10*time.Millisecond)
	produceSeq(t, addrs, keys, 2*per+1, 3*per)
	require.Eventually(t, func() bool { return j.allReached(keys, 3*per) }, 30*time.Second, 10*time.Millisecond)
	restored := 0
	for _, s := range survivor.w.Shards() {
		if s.Restored > 0 {
			restored++
		}
	}
	require.Equal(t, parts, restored, "the survivor did not restore the victim's checkpoints")
	survivor.stop(t)
	j.requireExactlyOnce(t, keys, 3*per)
}

// TestZombieCheckpointIsFenced: a worker is cut off the network after a
// checkpoint and after applying more records (no LeaveGroup, no final
// commit). When its session expires the survivor takes its partitions,
// restores the victim's last durable checkpoint and replays what came
// after. The victim, still running as a zombie, then tries to checkpoint:
// it is fenced (by its own lost ownership or by the survivor's later
// epoch on the stored manifest) and the survivor's state stays exact.
func TestZombieCheckpointIsFenced(t *testing.T) {
	const parts, per = 4, 50
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	keys := sensorKeys(16)
	durable := memory.New()
	j := newJournal()
	reg := seqRegistry(t)

	cut := &faults.Net{}
	vp := seqPipeline(addrs, durable, j.as("victim"))
	vp.Source = pipeline.KafkaSource{Brokers: addrs, Topic: topic, Group: "central", SessionTimeout: 2 * time.Second, RevokeTimeout: 2 * time.Second,
		ClientOptions: []kgo.Opt{kgo.Dialer(cut.Dial), kgo.RetryTimeout(2 * time.Second), kgo.RequestTimeoutOverhead(time.Second)}}
	victim := start(t, vp, pipeline.WithWorkerID("victim"), pipeline.WithOperators(reg))
	survivor := start(t, seqPipeline(addrs, durable, j.as("survivor")), pipeline.WithWorkerID("survivor"), pipeline.WithOperators(reg))
	require.Eventually(t, func() bool {
		v, s := victim.w.Stats().Owned, survivor.w.Stats().Owned
		return v > 0 && s > 0 && v+s == parts
	}, 20*time.Second, 10*time.Millisecond)

	produceSeq(t, addrs, keys, 1, per)
	require.Eventually(t, func() bool { return j.allReached(keys, per) }, 20*time.Second, 5*time.Millisecond)
	checkpoint := func(w *pipeline.Worker) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		return w.Checkpoint(ctx)
	}
	require.NoError(t, checkpoint(victim.w))

	produceSeq(t, addrs, keys, per+1, 2*per)
	require.Eventually(t, func() bool { return j.allReached(keys, 2*per) }, 20*time.Second, 5*time.Millisecond)
	cut.Cut()
	require.Eventually(t, func() bool { return survivor.w.Stats().Owned == parts }, 30*time.Second, 20*time.Millisecond)
	produceSeq(t, addrs, keys, 2*per+1, 3*per)
	require.Eventually(t, func() bool { return j.allReached(keys, 3*per) }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, checkpoint(survivor.w))

	// Whatever shards the zombie still believes it holds, its checkpoints
	// must not land.
	if err := checkpoint(victim.w); err != nil {
		require.ErrorIs(t, err, streaming.ErrFenced)
	}
	cut.Heal()
	victim.stop(t)
	survivor.stop(t)
	j.requireCounted(t, keys, 3*per)
	// The survivor's state after everything: a fresh worker restores it
	// and counts one more record per key exactly.
	produceSeq(t, addrs, keys, 3*per+1, 3*per+1)
	again := start(t, seqPipeline(addrs, durable, j.as("again")), pipeline.WithOperators(reg))
	require.Eventually(t, func() bool { return j.allReached(keys, 3*per+1) }, 30*time.Second, 10*time.Millisecond)
	again.stop(t)
	j.requireCounted(t, keys, 3*per+1)
}
