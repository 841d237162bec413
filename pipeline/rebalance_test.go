package pipeline_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tflo-io/tflo/pipeline"
)

const (
	envMemberBrokers = "TFLO_PIPELINE_TEST_MEMBER_BROKERS"
	envMemberID      = "TFLO_PIPELINE_TEST_MEMBER_ID"
)

// takeoverBound is what the Kafka source's defaults promise: partitions
// are owned again within it after a worker is killed, during a group join
// or not (session 10s, rebalance 12s, then a rejoin).
const takeoverBound = 15 * time.Second

// kfakeDeadJoinerBound is the bound when the worker killed during its
// join never comes back, on kfake: a static member whose JoinGroup answer
// could not be delivered gets no session timer there (Kafka starts one at
// the join and expires it after the session timeout), so the survivor's
// own rejoin waits until its JoinGroup request times out: the rebalance
// timeout (12s) plus franz-go's request overhead (10s). Before the fix it
// was the 60s default rebalance timeout plus the overhead.
const kfakeDeadJoinerBound = 25 * time.Second

// memberPipeline is a plain Kafka pipeline with the source's default
// group timeouts (what a spec that sets none gets).
func memberPipeline(addrs []string) pipeline.Pipeline {
	p := alarmPipeline(addrs, "")
	p.Source = pipeline.KafkaSource{Brokers: addrs, Topic: topic}
	return p
}

// TestChildGroupMember is not a test on its own: the rebalance tests run
// the test binary again with this test selected, as a worker in another
// process that they kill. It prints "OWNED n" whenever the number of
// partitions it owns changes.
func TestChildGroupMember(t *testing.T) {
	brokers := os.Getenv(envMemberBrokers)
	if brokers == "" {
		t.Skip("child process of the rebalance tests")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := pipeline.NewWorker(ctx, memberPipeline(strings.Split(brokers, ",")), pipeline.WithWorkerID(os.Getenv(envMemberID)))
	require.NoError(t, err)
	go func() {
		last := -1
		for ctx.Err() == nil {
			if n := w.Stats().Owned; n != last {
				fmt.Printf("OWNED %d\n", n)
				last = n
			}
			time.Sleep(5 * time.Millisecond) // polling a counter, not synchronising
		}
	}()
	require.NoError(t, w.Run(ctx)) // until killed
}

// member is a worker process running TestChildGroupMember.
type member struct {
	cmd   *exec.Cmd
	owned atomic.Int64
}

func startMember(t *testing.T, addrs []string, id string) *member {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestChildGroupMember$", "-test.count=1")
	cmd.Env = append(os.Environ(), envMemberBrokers+"="+strings.Join(addrs, ","), envMemberID+"="+id)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	m := &member{cmd: cmd}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if n, ok := strings.CutPrefix(sc.Text(), "OWNED "); ok {
				v, _ := strconv.Atoi(n)
				m.owned.Store(int64(v))
			}
		}
	}()
	return m
}

// TestKillDuringJoinTakeoverBound: a worker process is SIGKILLed while
// its JoinGroup is with the broker. Bug: the survivor got the partitions
// back only after franz-go's default 60s rebalance timeout (the group
// waited for the dead joiner's SyncGroup), and a restarted worker could
// not shorten that wait. Now the rebalance timeout is 12s by default and
// the member is static (group.instance.id = worker id): restarted at
// once, the worker replaces its dead self in the group and every
// partition is owned again within takeoverBound of the kill; left dead,
// within kfakeDeadJoinerBound (see there).
func TestKillDuringJoinTakeoverBound(t *testing.T) {
	if os.Getenv(envMemberBrokers) != "" {
		t.Skip("in the child")
	}
	for _, restart := range []bool{false, true} {
		t.Run(fmt.Sprintf("restart=%v", restart), func(t *testing.T) {
			const parts = 4
			c := newCluster(t, parts)
			addrs := c.ListenAddrs()
			survivor := start(t, memberPipeline(addrs), pipeline.WithWorkerID("survivor"))
			require.Eventually(t, func() bool { return survivor.w.Stats().Owned == parts }, 30*time.Second, 5*time.Millisecond)

			// The victim is killed the moment its JoinGroup reaches the
			// broker (a static member's first; a dynamic member's, as the
			// code before the fix made it, is its second, with the member
			// id the broker gave it); the broker then handles that join as
			// usual. Control functions run one at a time.
			var victim atomic.Pointer[member]
			killedAt := make(chan time.Time, 1)
			var joined atomic.Bool
			survivors := map[string]bool{}
			c.ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
				j := req.(*kmsg.JoinGroupRequest)
				if victim.Load() == nil {
					survivors[j.MemberID] = true
					return nil, nil, false
				}
				static := j.InstanceID != nil && *j.InstanceID == "victim"
				dynamic := j.InstanceID == nil && j.MemberID != "" && !survivors[j.MemberID]
				if (static || dynamic) && joined.CompareAndSwap(false, true) {
					_ = victim.Load().cmd.Process.Kill()
					killedAt <- time.Now()
				}
				return nil, nil, false
			})
			victim.Store(startMember(t, addrs, "victim"))
			var at time.Time
			select {
			case at = <-killedAt:
			case <-time.After(30 * time.Second):
				t.Fatal("the victim never joined the group")
			}
			_ = victim.Load().cmd.Wait()
			owned := func() int { return survivor.w.Stats().Owned }
			if restart {
				again := startMember(t, addrs, "victim")
				owned = func() int { return survivor.w.Stats().Owned + int(again.owned.Load()) }
			}
			// The victim's join makes the survivor give up partitions for
			// it; then every partition must be owned again in time.
			bound := takeoverBound
			if !restart {
				bound = kfakeDeadJoinerBound
			}
			deadline := at.Add(bound)
			for survivor.w.Stats().Owned == parts {
				require.True(t, time.Now().Before(deadline), "the victim's join never moved a partition")
				time.Sleep(time.Millisecond) // polling the condition against its deadline
			}
			for owned() != parts {
				require.True(t, time.Now().Before(deadline), "%d of %d partitions owned %s after the kill", owned(), parts, bound)
				time.Sleep(5 * time.Millisecond) // polling the condition against its deadline
			}
			t.Logf("all %d partitions owned %s after the kill during the join", parts, time.Since(at).Round(time.Millisecond))
		})
	}
}
