package fakeactivities

import (
	"context"
	"sync/atomic"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/workflows"
)

// DeadWorker is the worker id whose KeepLeases heartbeats once and then
// goes silent, like a killed worker.
const DeadWorker = "dead"

// Stages counts what the stand-ins did.
type Stages struct {
	Replayed atomic.Int64 // files replayed
	// ReplayPartition, when set before Register, stands in for the
	// ReplayPartition activity instead of the stand-in that replays its
	// partitions at once (and counts them in Replayed).
	ReplayPartition func(context.Context, activities.ReplayPartitionInput) (activities.ReplayPartitionResult, error)
}

// Register registers every stand-in on w.
func (f *Stages) Register(w worker.Worker) {
	reg := func(fn any, name string) { w.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	reg(func(_ context.Context, ref activities.ShardRef) (activities.CheckpointSummary, error) {
		return activities.CheckpointSummary{CheckpointID: 4, Epoch: ref.Epoch, Cursor: "readings/0@40", Bytes: 512}, nil
	}, "FinalCheckpoint")
	reg(func(_ context.Context, ref activities.ShardRef) (activities.RestoreSummary, error) {
		return activities.RestoreSummary{CheckpointID: 4, Epoch: ref.Epoch - 1, Cursor: "readings/0@40", Bytes: 512}, nil
	}, "Restore")
	reg(func(_ context.Context, ref activities.ShardRef) error { return nil }, "Resume")
	reg(func(ctx context.Context, in activities.LeaseInput) error {
		if in.WorkerID == DeadWorker {
			activity.RecordHeartbeat(ctx, []activities.HeldShard{{Pipeline: "iot", Shard: "readings-1", Epoch: 2, WorkerID: DeadWorker, TaskQueue: workflows.WorkerTaskQueue("w1")}})
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}, "KeepLeases")
	reg(func(context.Context, activities.ListArchiveInput) (activities.ListArchiveResult, error) {
		return activities.ListArchiveResult{Files: []activities.ArchiveFile{{Name: "a.parquet", Rows: 10}, {Name: "b.parquet", Rows: 20}, {Name: "c.parquet", Rows: 5}}, TotalRows: 35}, nil
	}, "ListArchive")
	reg(func(_ context.Context, in activities.ReplayFileInput) (activities.ReplayFileResult, error) {
		f.Replayed.Add(1)
		return activities.ReplayFileResult{File: in.File, Rows: 10, Written: 10}, nil
	}, "ReplayFile")
	// The partition-paged backfill over the same three files: partition
	// a/shard-000000/ holds two, b/shard-000000/ one.
	files := map[string]int{"a/shard-000000/": 2, "b/shard-000000/": 1}
	reg(func(context.Context, activities.CountArchiveInput) (activities.ArchiveTotals, error) {
		return activities.ArchiveTotals{Files: 3, Bytes: 3000, Partitions: 2}, nil
	}, "CountArchive")
	reg(func(_ context.Context, in activities.ListPartitionsInput) (activities.ListPartitionsResult, error) {
		if in.After == "" {
			return activities.ListPartitionsResult{Partitions: []string{"a/shard-000000/"}, More: true}, nil
		}
		return activities.ListPartitionsResult{Partitions: []string{"b/shard-000000/"}}, nil
	}, "ListPartitions")
	if f.ReplayPartition != nil {
		reg(f.ReplayPartition, "ReplayPartition")
		return
	}
	reg(func(_ context.Context, in activities.ReplayPartitionInput) (activities.ReplayPartitionResult, error) {
		n := 0 // the partition's files and those of the partitions after it
		for _, p := range append([]string{in.Partition}, in.Then...) {
			n += files[p]
		}
		f.Replayed.Add(int64(n))
		return activities.ReplayPartitionResult{Partition: in.Partition, Finished: 1 + len(in.Then), Done: true, Files: n, Bytes: int64(n) * 1000, Rows: int64(n) * 10, Written: int64(n) * 10}, nil
	}, "ReplayPartition")
}
