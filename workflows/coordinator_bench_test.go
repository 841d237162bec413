package workflows_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/internal/benchratio"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/files"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/fakeactivities"
	"github.com/tflo-io/tflo/testsuite/temporaltest"
	"github.com/tflo-io/tflo/workflows"
)

// The 64-shard round benchmarks compare a round through Temporal with the
// in-process Checkpointer on the same shards; the baselines (measured
// first, in the same run) checkpoint those shards one by one with
// Checkpointer.Checkpoint.
func TestMain(m *testing.M) {
	benchratio.Main(m, benchratio.Baselines{"BenchmarkRound64Shards": {
		"inprocess-memory": func(b *testing.B) { baselineInProcess(b, roundShards(b, "memory")) },
		"inprocess-files":  func(b *testing.B) { baselineInProcess(b, roundShards(b, "files")) },
	}})
}

const (
	benchKeys  = 32  // keys per shard, all changed between rounds
	benchValue = 100 // bytes per key
)

var (
	roundShardsMu sync.Mutex
	roundShardSet = map[string]*fakeactivities.MemoryShards{}
)

// roundShards returns the 64 shards of one worker the round benchmarks
// share, over an in-memory store or a files store (one fsync per batch).
func roundShards(b *testing.B, store string) *fakeactivities.MemoryShards {
	roundShardsMu.Lock()
	defer roundShardsMu.Unlock()
	if ms := roundShardSet[store]; ms != nil {
		return ms
	}
	var st fakeactivities.Store = memory.New()
	if store == "files" {
		dir, err := os.MkdirTemp("", "tflo-round-bench-")
		if err != nil {
			b.Fatal(err)
		}
		fs, err := files.Open(dir)
		if err != nil {
			b.Fatal(err)
		}
		st = fs
	}
	ms, err := fakeactivities.NewMemoryShards("bench-"+store, 64, benchKeys, benchValue, st, "w1")
	if err != nil {
		b.Fatal(err)
	}
	roundShardSet[store] = ms
	return ms
}

func baselineInProcess(b *testing.B, ms *fakeactivities.MemoryShards) {
	ctx := context.Background()
	for b.Loop() {
		ms.Touch()
		for _, cp := range ms.Checkpointers {
			if _, err := cp.Checkpoint(ctx); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkRound64Shards: one round of 64 shards through Temporal (the
// checkpoint-now Update, the round activity on the worker's queue, the
// summary back) against the in-process Checkpointer on the same shards;
// x-inprocess-<store> is the ratio (target ≤ 5). group-ns/op is the same
// batched CheckpointGroup in process, without Temporal.
func BenchmarkRound64Shards(b *testing.B) {
	srv := temporaltest.Start(b)
	c := srv.Client
	startControlWorker(b, c)
	for _, store := range []string{"memory", "files"} {
		b.Run("store="+store, func(b *testing.B) {
			ms := roundShards(b, store)
			w := worker.New(c, workflows.WorkerTaskQueue("w1"), worker.Options{})
			w.RegisterActivity(&activities.Rounds{Host: ms.Hosts["w1"]})
			if err := w.Start(); err != nil {
				b.Fatal(err)
			}
			defer w.Stop()
			ctx := context.Background()
			in := workflows.CoordinatorInput{Pipeline: ms.Pipeline, Manual: true}
			if _, err := workflows.Announce(ctx, c, in, workflows.Announcement{WorkerID: "w1", TaskQueue: workflows.WorkerTaskQueue("w1"), Shards: ms.Announcements()["w1"]}); err != nil {
				b.Fatal(err)
			}
			round := func() {
				ms.Touch()
				s, err := workflows.CheckpointRoundNow(ctx, c, ms.Pipeline, "bench")
				if err != nil {
					b.Fatal(err)
				}
				if s.OK != 64 {
					b.Fatalf("round %d: %s", s.Round, s)
				}
			}
			round() // warm up: first round writes the base state
			b.ResetTimer()
			for b.Loop() {
				round()
			}
			b.StopTimer()
			benchratio.Report(b, "inprocess-"+store, nil)
			// The same shards through CheckpointGroup in process (what the
			// round activity runs), timed by hand: testing.Benchmark cannot
			// run inside a benchmark.
			members := make([]streaming.GroupMember, len(ms.Checkpointers))
			const groupRounds = 20
			start := time.Now()
			for range groupRounds {
				ms.Touch()
				for i, cp := range ms.Checkpointers {
					e, _ := cp.Owner()
					members[i] = streaming.GroupMember{Checkpointer: cp, Epoch: e}
				}
				for _, o := range streaming.CheckpointGroup(ctx, members) {
					if o.Err != nil {
						b.Fatal(o.Err)
					}
				}
			}
			group := time.Since(start) / groupRounds
			b.ReportMetric(float64(group.Nanoseconds()), "group-ns/op")
			// The coordinator stays up: b.Run calls this again with a
			// larger b.N, on the same shards.
		})
	}
}

// benchPipeline spreads n in-memory shards over workers workers (each on
// its own queue, running the real round activity), announces them, which
// starts the coordinator with in, and returns the shards and the
// coordinator's first run id.
func benchPipeline(b *testing.B, c client.Client, in workflows.CoordinatorInput, n, keys, value, workers int) (*fakeactivities.MemoryShards, string) {
	ids := make([]string, workers)
	for i := range ids {
		ids[i] = fmt.Sprintf("%s-w%d", in.Pipeline, i)
	}
	ms, err := fakeactivities.NewMemoryShards(in.Pipeline, n, keys, value, memory.New(), ids...)
	if err != nil {
		b.Fatal(err)
	}
	startMemoryWorkers(b, c, ms, ids...)
	return ms, announceAll(b, context.Background(), c, in, ms)
}

// chainCounts counts the events and billable actions of every run of a
// workflow id, following continue-as-new from the first run.
type chainCounts struct {
	events, actions int
	bytes           int
}

// actionEvents are the events Temporal Cloud bills as actions.
var actionEvents = map[enumspb.EventType]bool{
	enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:                   true,
	enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:                      true,
	enumspb.EVENT_TYPE_TIMER_STARTED:                                true,
	enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:     true,
	enumspb.EVENT_TYPE_SIGNAL_EXTERNAL_WORKFLOW_EXECUTION_INITIATED: true,
	enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:                  true,
	enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:           true,
	enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:            true,
	enumspb.EVENT_TYPE_MARKER_RECORDED:                              true,
}

func countChain(b testing.TB, c client.Client, id, runID string) chainCounts {
	var out chainCounts
	eachEvent(b, c, id, runID, func(ev *historypb.HistoryEvent) {
		out.events++
		out.bytes += ev.Size()
		if actionEvents[ev.GetEventType()] {
			out.actions++
		}
	})
	return out
}

// eachEvent calls fn with every event of every run of a workflow id,
// following continue-as-new from runID.
func eachEvent(b testing.TB, c client.Client, id, runID string, fn func(*historypb.HistoryEvent)) {
	for runID != "" {
		next := ""
		for _, ev := range temporaltest.History(b, context.Background(), c, id, runID) {
			fn(ev)
			if a := ev.GetWorkflowExecutionContinuedAsNewEventAttributes(); a != nil {
				next = a.GetNewExecutionRunId()
			}
		}
		runID = next
	}
}

// BenchmarkRoundHistory counts, on the dev server, the history events,
// billable actions and history bytes per round of the coordinator at 4,
// 64 and 1,024 shards on 2 and 8 workers (in-memory shards, rounds on a
// 100ms timer, continue-as-new included). x-events-vs-4-shards is the
// ratio to the 4-shard run with the same workers in the same benchmark run
// (target ≤ 1.2 at 1,024 shards). Run with -benchtime=Nx: one op is one
// round.
var benchRuns int

func BenchmarkRoundHistory(b *testing.B) {
	srv := temporaltest.Start(b)
	c := srv.Client
	startControlWorker(b, c)
	base, basePerWorker := map[int]float64{}, map[int]float64{}
	for _, workers := range []int{2, 8} {
		for _, shards := range []int{4, 64, 1024} {
			b.Run(fmt.Sprintf("workers=%d/shards=%d", workers, shards), func(b *testing.B) {
				// b.Run calls this more than once (b.N 1, then N): a
				// pipeline of its own each time, so no announcement goes
				// to the coordinator the previous call is stopping.
				benchRuns++
				pipeline := fmt.Sprintf("hist-%d-%d-%d", workers, shards, benchRuns)
				ctx := context.Background()
				in := workflows.CoordinatorInput{Pipeline: pipeline, Interval: activities.Duration(100 * time.Millisecond)}
				_, first := benchPipeline(b, c, in, shards, 4, 16, workers)
				id := workflows.CoordinatorWorkflowID(pipeline)
				status := func() workflows.CoordinatorStatus {
					v, err := c.QueryWorkflow(ctx, id, "", workflows.QueryStatus)
					if err != nil {
						b.Fatal(err)
					}
					var st workflows.CoordinatorStatus
					if err := v.Get(&st); err != nil {
						b.Fatal(err)
					}
					return st
				}
				deadline := time.Now().Add(10 * time.Minute)
				waitRounds := func(n uint64) uint64 {
					for time.Now().Before(deadline) {
						st := status()
						if st.Round > n && st.InFlight == nil || st.Round > n+1 {
							return st.Round
						}
						time.Sleep(20 * time.Millisecond) // polling interval of the wait
					}
					b.Fatalf("round %d did not come within 10 minutes", n+1)
					return 0
				}
				r0 := waitRounds(2) // past the announcements
				c0 := countChain(b, c, id, first)
				b.ResetTimer()
				r1 := waitRounds(r0 + uint64(b.N) - 1)
				b.StopTimer()
				c1 := countChain(b, c, id, first)
				st := status()
				rounds := float64(r1 - r0)
				events := float64(c1.events-c0.events) / rounds
				b.ReportMetric(events, "events/round")
				b.ReportMetric(float64(c1.actions-c0.actions)/rounds, "actions/round")
				b.ReportMetric(float64(c1.bytes-c0.bytes)/rounds, "history-B/round")
				b.ReportMetric(float64(st.Generation), "continue-as-new")
				// Only workers that own a shard get a share: 4 shards on 8
				// workers keep 4 busy.
				perWorker := events / float64(min(workers, shards))
				b.ReportMetric(perWorker, "events/round/busy-worker")
				if shards == 4 {
					base[workers], basePerWorker[workers] = events, perWorker
				} else if base[workers] > 0 {
					b.ReportMetric(events/base[workers], "x-events-vs-4-shards")
					b.ReportMetric(perWorker/basePerWorker[workers], "x-per-busy-worker-vs-4-shards")
				}
				if st.Failed > 0 || st.Last == nil || st.Last.OK != shards {
					v, _ := c.QueryWorkflow(ctx, id, "", workflows.QueryShards)
					var rows []workflows.ShardRow
					_ = v.Get(&rows)
					for _, r := range rows {
						if r.Status != workflows.ShardOK || r.Round < st.Round-1 {
							b.Logf("%+v", r)
						}
					}
					b.Logf("workers: %+v", st.Workers)
					dumpTaskFailures(b, c, id)
					b.Fatalf("rounds did not all checkpoint every shard: %+v", st.Last)
				}
				_ = c.SignalWorkflow(ctx, id, "", workflows.SignalStop, nil)
			})
		}
	}
}

// BenchmarkLoadRounds is the load run: 1,024 shards on 4 workers with 1 s
// rounds for TFLO_LOAD_MINUTES (default 5) minutes on the dev server. It
// reports the share of rounds that completed within their interval, the
// p50/p99 round duration, and the dev server's CPU (from /proc of its
// process). One op is the whole run: use -benchtime=1x.
func BenchmarkLoadRounds(b *testing.B) {
	minutes := 5.0
	if v := os.Getenv("TFLO_LOAD_MINUTES"); v != "" {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			b.Fatalf("TFLO_LOAD_MINUTES=%q: %v", v, err)
		}
		minutes = f
	}
	srv := temporaltest.Start(b)
	c := srv.Client
	startControlWorker(b, c)
	const pipeline, interval = "load", time.Second
	ctx := context.Background()
	ms, first := benchPipeline(b, c, workflows.CoordinatorInput{Pipeline: pipeline, Interval: activities.Duration(interval)}, 1024, 8, 32, 4)
	id := workflows.CoordinatorWorkflowID(pipeline)
	stop := make(chan struct{})
	touched := make(chan struct{})
	go func() { // the hot path changes every key between rounds
		defer close(touched)
		t := time.NewTicker(interval / 2)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				ms.Touch()
			}
		}
	}()
	cpu0, wall0 := srv.CPU(b), time.Now()
	b.ResetTimer()
	time.Sleep(time.Duration(minutes * float64(time.Minute))) // the load run's length, not synchronisation
	b.StopTimer()
	cpu1, wall1 := srv.CPU(b), time.Now()
	close(stop)
	<-touched
	_ = c.SignalWorkflow(ctx, id, "", workflows.SignalStop, nil)

	durations := roundDurations(b, c, id, first)
	if len(durations) == 0 {
		b.Fatal("no round completed")
	}
	within := 0
	for _, d := range durations {
		if d <= interval {
			within++
		}
	}
	slices.Sort(durations)
	b.ReportMetric(float64(len(durations)), "rounds")
	b.ReportMetric(100*float64(within)/float64(len(durations)), "%-within-interval")
	b.ReportMetric(float64(durations[len(durations)/2].Milliseconds()), "p50-ms")
	b.ReportMetric(float64(durations[len(durations)*99/100].Milliseconds()), "p99-ms")
	b.ReportMetric(100*(cpu1-cpu0).Seconds()/wall1.Sub(wall0).Seconds(), "server-cpu-%")
}

// roundDurations reads each round's duration from the history: from its
// first activity scheduled to its last share completed (or timed out).
func roundDurations(b *testing.B, c client.Client, id, runID string) []time.Duration {
	type span struct{ start, end time.Time }
	rounds := map[uint64]*span{}
	scheduled := map[int64]uint64{} // scheduled event id → round
	eachEvent(b, c, id, runID, func(ev *historypb.HistoryEvent) {
		at := ev.GetEventTime().AsTime()
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil && a.GetActivityType().GetName() == "CheckpointRound" {
			var in activities.RoundInput
			if err := json.Unmarshal(a.GetInput().GetPayloads()[0].GetData(), &in); err != nil {
				b.Fatal(err)
			}
			scheduled[ev.GetEventId()] = in.Round
			if rounds[in.Round] == nil {
				rounds[in.Round] = &span{start: at}
			}
		}
		var sched int64
		switch {
		case ev.GetActivityTaskCompletedEventAttributes() != nil:
			sched = ev.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()
		case ev.GetActivityTaskTimedOutEventAttributes() != nil:
			sched = ev.GetActivityTaskTimedOutEventAttributes().GetScheduledEventId()
		case ev.GetActivityTaskFailedEventAttributes() != nil:
			sched = ev.GetActivityTaskFailedEventAttributes().GetScheduledEventId()
		}
		if r, ok := scheduled[sched]; ok && sched != 0 {
			if s := rounds[r]; at.After(s.end) {
				s.end = at
			}
		}
	})
	var out []time.Duration
	for _, s := range rounds {
		if !s.end.IsZero() {
			out = append(out, s.end.Sub(s.start))
		}
	}
	return out
}

func dumpTaskFailures(b *testing.B, c client.Client, id string) {
	it := c.GetWorkflowHistory(context.Background(), id, "", false, 0)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return
		}
		switch {
		case ev.GetWorkflowTaskFailedEventAttributes() != nil:
			a := ev.GetWorkflowTaskFailedEventAttributes()
			b.Logf("event %d: workflow task failed: %v: %v", ev.GetEventId(), a.GetCause(), a.GetFailure())
		case ev.GetWorkflowTaskTimedOutEventAttributes() != nil:
			b.Logf("event %d: workflow task timed out: %v", ev.GetEventId(), ev.GetWorkflowTaskTimedOutEventAttributes())
		case ev.GetWorkflowExecutionUpdateAcceptedEventAttributes() != nil:
			a := ev.GetWorkflowExecutionUpdateAcceptedEventAttributes()
			in := a.GetAcceptedRequest().GetInput().GetArgs().GetPayloads()
			arg := ""
			if len(in) > 0 {
				arg = string(in[0].GetData())[:40]
			}
			b.Logf("event %d: update accepted (messages %s): %s", ev.GetEventId(), a.GetAcceptedRequestMessageId(), arg)

		}
	}
}
