package keyedstate_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/faults"
)

// process is one incarnation of a worker: its own Badger, runtime and
// checkpointer over the shared durable store. A crash throws it away.
type process struct {
	db *badger.DB
	rt *keyedstate.Runtime[string]
	cp *streaming.Checkpointer
}

func startProcess(t *testing.T, g *streaming.Graph, store faults.Store) (*process, int) {
	t.Helper()
	db, err := badger.Open(testDBOptions())
	require.NoError(t, err)
	rt, err := keyedstate.New[string](g, keyedstate.StringKeys{}, db, small(30)...)
	require.NoError(t, err)
	cp, err := streaming.NewCheckpointer("shard-0", rt, store, store,
		streaming.WithMaxRuns(3), streaming.WithOperators(g.Operators()))
	require.NoError(t, err)
	p := &process{db: db, rt: rt, cp: cp}
	info, err := cp.Restore(context.Background())
	if errors.Is(err, streaming.ErrNotFound) {
		return p, 0
	}
	require.NoError(t, err)
	return p, seqOf(t, info.CursorType, info.Cursor) + 1 // resume after the cursor
}

func (p *process) kill() {
	_ = p.rt.Close()
	_ = p.db.Close()
}

// Feed 10,000 records through a keyed SMA graph, crash at many seeded
// random points — between two records, inside a store write (optionally a
// torn batch), between any two checkpoint stages — restore and continue:
// the final state equals a run without crashes, every time.
func TestCrashRecovery(t *testing.T) {
	ctx := context.Background()
	const n = 10_000
	g := smaGraph(t)
	recs := makeRecords(42, n, 200)
	want := reference(g, recs)
	keys := keysOf(recs)
	seeds := 8
	if testing.Short() {
		seeds = 2
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(uint64(seed), 99))
			mem := memory.New()
			store := faults.Wrap(mem, mem)
			p, next := startProcess(t, g, store)
			defer func() { p.kill() }()
			crashes, failures := map[string]int{}, 0
			crash := func(why string) {
				crashes[why]++
				store.Heal()
				p.kill()
				p, next = startProcess(t, g, store)
			}
			const maxCrashes = 30
			total := func() int {
				s := 0
				for _, c := range crashes {
					s += c
				}
				return s
			}
			for next < n {
				r := recs[next]
				_, err := p.rt.Apply(r.key, r.ts, "seq", seqCursor(next), streaming.Float(r.value))
				require.NoError(t, err)
				next++
				if total() < maxCrashes && rng.IntN(1500) == 0 {
					crash("between records")
					continue
				}
				if next%200 != 0 {
					continue
				}
				inject := total() < maxCrashes && rng.IntN(3) == 0
				if inject {
					var torn func(int) int
					if rng.IntN(2) == 0 {
						torn = func(items int) int { return items / 2 }
					}
					store.CrashAfter(rng.IntN(5), torn)
				} else if rng.IntN(8) == 0 {
					store.FailNext([]faults.Op{faults.OpSaveBatch, faults.OpSaveIfUnchanged, faults.OpSaveCursor}[rng.IntN(3)], 1)
				}
				stopAfter := 3
				if inject && rng.IntN(2) == 0 {
					stopAfter = rng.IntN(3) // the process dies after this many stages
				}
				err = runStages(ctx, p.cp, stopAfter)
				switch {
				case store.Crashed():
					// nil when the crash hit a best-effort delete of
					// unreferenced pieces
					if err != nil {
						require.ErrorIs(t, err, faults.ErrCrashed)
					}
					crash("inside a store write")
				case stopAfter < 3:
					store.Heal()
					crash(fmt.Sprintf("after stage %d", stopAfter))
				case err != nil:
					require.ErrorIs(t, err, faults.ErrInjected)
					failures++
					store.Heal()
				}
			}
			store.Heal()
			_, err := p.cp.Checkpoint(ctx)
			require.NoError(t, err)
			requireSameState(t, want, p.rt, keys)

			final, _ := startProcess(t, g, store)
			defer final.kill()
			requireSameState(t, want, final.rt, keys)
			require.Positive(t, total(), "the seed crashed nowhere")
			t.Logf("crashes %v, store failures %d", crashes, failures)
		})
	}
}

// runStages runs the first k stages of a checkpoint one by one, as the
// Temporal workflow does (k = 3: all of them).
func runStages(ctx context.Context, cp *streaming.Checkpointer, k int) error {
	if k == 0 {
		return nil
	}
	epoch, _ := streaming.LocalShard[string]{}.AssignmentEpoch(), true
	info, err := cp.Snapshot(ctx, epoch)
	if err != nil || k == 1 {
		return err
	}
	if _, err := cp.SaveState(ctx, info.ID); err != nil || k == 2 {
		return err
	}
	return cp.CommitCursor(ctx, info.ID)
}
