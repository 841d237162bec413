package split_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/tflo-io/tflo/coordination/memstore"
	"github.com/tflo-io/tflo/coordination/split"
)

func ExampleAssign() {
	out := split.Assign(split.AssignInput{
		Splits: []split.Spec{
			{ID: "orders-0", Weight: 3}, {ID: "orders-1", Weight: 3},
			{ID: "sensors-0", Weight: 1}, {ID: "sensors-1", Weight: 1}, {ID: "sensors-2", Weight: 1},
		},
		Workers: []split.WorkerCap{{ID: "a"}, {ID: "b", Capacity: 4}},
		Current: map[split.SplitID]split.WorkerID{"orders-0": "b"}, // sticky
	})
	// Fill goes heaviest first to the least loaded worker (ties by id);
	// a=5, b=4 admits no improving move of a weight-1 split.
	for _, id := range slices.Sorted(maps.Keys(out)) {
		fmt.Println(id, "->", out[id])
	}
	// Output:
	// orders-0 -> b
	// orders-1 -> a
	// sensors-0 -> a
	// sensors-1 -> b
	// sensors-2 -> a
}

func ExampleWorker() {
	store, _ := memstore.New(memstore.WithLeaseTTL(time.Second))
	ctx, cancel := context.WithCancel(context.Background())
	_ = split.AddSplits(ctx, store,
		split.Spec{ID: "files-000-099", Weight: 1},
		split.Spec{ID: "files-100-199", Weight: 1})

	acquired := make(chan string)
	w, _ := split.NewWorker(store, "worker-1", split.WithHandler(func(ctx context.Context, t *split.Tenancy) error {
		acquired <- fmt.Sprintf("%s epoch %d resumes after %d", t.Spec().ID, t.Epoch(), t.Resume().Watermark)
		select {
		case <-ctx.Done():
		case <-t.Revoking():
		}
		return t.Commit(context.Background(), t.Resume().Watermark+10, nil) // commit the tail, release
	}))
	done := make(chan error)
	go func() { done <- w.Run(ctx) }()

	got := []string{<-acquired, <-acquired}
	slices.Sort(got)
	for _, s := range got {
		fmt.Println(s)
	}
	cancel()
	fmt.Println("run:", <-done)
	// Output:
	// files-000-099 epoch 1 resumes after 0
	// files-100-199 epoch 1 resumes after 0
	// run: <nil>
}
