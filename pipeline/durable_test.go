package pipeline_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
	"github.com/tflo-io/tflo/testsuite/logtest"
)

// TestWorkersShareDurableFolder: two workers on one machine share one
// durable folder (state.durable.dir), as the README shows. Bug: the
// second worker refused to start ("files state store folder is locked by
// another process"): the folder was one files store, locked by the first
// worker. Now each shard keeps its checkpoints in its own folder, locked
// only by its owner: both workers run, and when one stops, the other
// restores its shards from their folders and every output equals one
// uninterrupted run's.
func TestWorkersShareDurableFolder(t *testing.T) {
	const parts = 4
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	dir := t.TempDir()
	rec := newRecorder()
	p := alarmPipeline(addrs, dir, rec.shared())
	src := p.Source.(pipeline.KafkaSource)
	src.SessionTimeout = 2 * time.Second
	p.Source = src

	a := start(t, p, pipeline.WithWorkerID("a"))
	b := start(t, p, pipeline.WithWorkerID("b"))
	require.Eventually(t, func() bool {
		na, nb := a.w.Stats().Owned, b.w.Stats().Owned
		return na > 0 && nb > 0 && na+nb == parts
	}, 30*time.Second, 10*time.Millisecond, "the two workers never shared the partitions")
	fromA := heldShards(a.w)

	phase1 := makeReadings(16, 1, 40)
	produce(t, addrs, phase1)
	require.Eventually(t, func() bool { return rec.has(reference(t, p, phase1)) }, 30*time.Second, 10*time.Millisecond)

	// a stops: its final checkpoints go to its shards' folders, and b
	// (once a's static membership expires) restores them from there.
	a.stop(t)
	require.Eventually(t, func() bool { return b.w.Stats().Owned == parts }, 30*time.Second, 10*time.Millisecond)
	for _, s := range b.w.Shards() {
		if slices.Contains(fromA, s.Shard) {
			require.Positive(t, s.Restored, "b did not restore shard %s from a's checkpoint", s.Shard)
		}
	}
	for _, s := range allShards(parts) {
		entries, err := os.ReadDir(filepath.Join(dir, p.Name, pipeline.ShardFolderName(s)))
		require.NoError(t, err, "shard %s has no folder of its own", s)
		require.NotEmpty(t, entries)
	}

	phase2 := makeReadings(16, 41, 80)
	produce(t, addrs, phase2)
	want := reference(t, p, append(phase1, phase2...))
	require.Eventually(t, func() bool { return rec.has(want) }, 30*time.Second, 10*time.Millisecond)
	b.stop(t)
	rec.requireExact(t, want)
}

// A worker with no state folder keeps its state, and by default its
// checkpoints, in an in-memory Badger database, which refuses a value
// larger than its value threshold (half a MiB at 96 MiB, at most 1 MiB):
// a checkpoint of more keys than one piece holds must still complete.
func TestInMemoryStateCheckpointsManyKeys(t *testing.T) {
	c := newCluster(t, 1, topic)
	const sensors = 40_000 // pieces of ~1 MiB at the runtime's default
	rs := makeReadings(sensors, 0, 1)
	produce(t, c.ListenAddrs(), rs)
	p := alarmPipeline(c.ListenAddrs(), "")
	p.State.Durable = pipeline.Durable{}
	p.Checkpoint.Interval = 100 * time.Millisecond
	r := start(t, p)
	r.waitFor(t, func() bool {
		for _, s := range r.w.Shards() {
			if s.Checkpoint.LastID > 0 && s.Checkpoint.StateBytes > 1<<20 {
				return true
			}
			require.Zero(t, s.Checkpoint.Failures, "checkpoint failed: %s", s.Checkpoint.LastError)
		}
		return false
	}, 60*time.Second, "a checkpoint of every key")
}

// TestDurableS3KeyVariablesMustHoldKeys: state.durable.s3's
// access_key_env and secret_key_env naming unset variables fell back to
// the AWS SDK's default credential chain (other credentials than the spec
// names, or an error that does not say why), and one given without the
// other was refused only at start, without naming the missing variable;
// Validate refuses one without the other, and the worker refuses a named
// variable that is unset, naming it.
func TestDurableS3KeyVariablesMustHoldKeys(t *testing.T) {
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true") // no instance-metadata probe
	t.Setenv("TFLO_TEST_S3_KEY", "key")
	p := alarmPipeline([]string{"127.0.0.1:1"}, "")
	s3 := &pipeline.S3Store{Bucket: "ckpt", Endpoint: "http://127.0.0.1:1", Region: "us-east-1", AccessKeyEnv: "TFLO_TEST_S3_KEY"}
	p.State.Durable = pipeline.Durable{S3: s3}
	require.ErrorContains(t, p.Validate(), "state.durable.s3: give access_key_env and secret_key_env together")

	s3.SecretKeyEnv = "TFLO_TEST_S3_SECRET_UNSET"
	require.NoError(t, p.Validate())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := pipeline.NewWorker(ctx, p, pipeline.WithWorkerID("plant-1"))
	require.ErrorContains(t, err, "durable bucket ckpt: state.durable.s3.secret_key_env names TFLO_TEST_S3_SECRET_UNSET, which is unset or empty")

	s3.AccessKeyEnv = "TFLO_TEST_S3_KEY_UNSET"
	_, err = pipeline.NewWorker(ctx, p, pipeline.WithWorkerID("plant-1"))
	require.ErrorContains(t, err, "durable bucket ckpt: state.durable.s3.access_key_env names TFLO_TEST_S3_KEY_UNSET, which is unset or empty")
}

// TestKafkaShardEpochClaimedPastTheGroups: a Kafka shard's epoch comes
// from the group's generation, which does not fence a static member's
// old process: restarted while the old one hangs, the member rejoins in
// the generation the old one holds, and both runs committed checkpoints
// at the same epoch. Here two groups stand for the two runs (each
// member's first generation gives the same epoch). Now a run claims its
// epoch past every earlier claim where epochs are claimed (here the
// coordination store): the second run's epoch is one past the first's,
// and the first run's checkpoints are refused.
func TestKafkaShardEpochClaimedPastTheGroups(t *testing.T) {
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	store, durable := newCoordStore(t, 5*time.Second), memory.New()
	run := func(group string) *running {
		p := alarmPipeline(addrs, "")
		p.State.Durable = pipeline.Durable{Store: durable}
		src := p.Source.(pipeline.KafkaSource)
		src.Group = group
		p.Source = src
		r := start(t, p, pipeline.WithWorkerID(group), pipeline.WithCoordination(store))
		require.Eventually(t, func() bool { return len(r.w.Shards()) == 1 }, waitFor, time.Millisecond)
		return r
	}
	old := run("old")
	first := old.w.Shards()[0].Epoch
	require.NoError(t, old.w.Checkpoint(context.Background()))

	restarted := run("restarted")
	require.Equal(t, first+1, restarted.w.Shards()[0].Epoch, "the same generation's epoch, claimed past the old run's")
	require.NoError(t, restarted.w.Checkpoint(context.Background()))
	require.ErrorIs(t, old.w.Checkpoint(context.Background()), streaming.ErrFenced, "the old run's checkpoint is fenced")
	require.ErrorIs(t, old.stopErr(t), streaming.ErrFenced, "so is its final one, which its stop reports")
}

// TestReleasedShardStateLeavesTheDatabase: a worker that gives up a
// shard while it runs (a rebalance) deletes the state the shard left in
// its state database (keyedstate.DeleteState; TestDeleteState there
// shows it deletes the states written behind). Bug: they stayed until the
// worker held the shard again, outside the memory budget in an in-memory
// database (no state folder). The shard, back here later, restores and
// every output equals one uninterrupted run's.
func TestReleasedShardStateLeavesTheDatabase(t *testing.T) {
	const parts = 2
	c := newCluster(t, parts)
	addrs := c.ListenAddrs()
	rec := newRecorder()
	p := alarmPipeline(addrs, "", rec.shared())
	p.State.Durable = pipeline.Durable{Store: memory.New()} // shared by both workers
	src := p.Source.(pipeline.KafkaSource)
	src.SessionTimeout = 2 * time.Second
	p.Source = src

	dropped := logtest.NewCounter("state of a released shard deleted")
	a := start(t, p, pipeline.WithWorkerID("a"), pipeline.WithLogger(dropped.Logger()))
	require.Eventually(t, func() bool { return a.w.Stats().Owned == parts }, 30*time.Second, 10*time.Millisecond)
	phase1 := makeReadings(16, 1, 40)
	produce(t, addrs, phase1)
	require.Eventually(t, func() bool { return rec.has(reference(t, p, phase1)) }, 30*time.Second, 10*time.Millisecond)

	b := start(t, p, pipeline.WithWorkerID("b"))
	require.Eventually(t, func() bool { return len(heldShards(a.w)) == 1 && len(heldShards(b.w)) == 1 }, 30*time.Second, 10*time.Millisecond)
	moved := heldShards(b.w)[0]
	require.Eventually(t, func() bool { return dropped.Lines() == 1 }, 30*time.Second, 10*time.Millisecond, "shard %s's state was not deleted from a's database", moved)
	n, err := pipeline.StateKeys(a.w, moved)
	require.NoError(t, err)
	require.Zero(t, n)

	// b stops: a restores the moved shard from b's final checkpoint.
	b.stop(t)
	require.Eventually(t, func() bool { return a.w.Stats().Owned == parts }, 30*time.Second, 10*time.Millisecond)
	phase2 := makeReadings(16, 41, 80)
	produce(t, addrs, phase2)
	want := reference(t, p, append(phase1, phase2...))
	require.Eventually(t, func() bool { return rec.has(want) }, 30*time.Second, 10*time.Millisecond)
	a.stop(t)
	rec.requireExact(t, want)
	require.Equal(t, int64(1), dropped.Lines(), "a shard released because its worker stops keeps its state")
}

// TestDurableS3NegativeResponseTimeoutRefused: Validate names the key.
func TestDurableS3NegativeResponseTimeoutRefused(t *testing.T) {
	p := alarmPipeline([]string{"127.0.0.1:1"}, "")
	p.State.Durable = pipeline.Durable{S3: &pipeline.S3Store{Bucket: "ckpt", ResponseTimeout: -time.Second}}
	require.ErrorContains(t, p.Validate(), "state.durable.s3.response_timeout -1s is negative (0: the default, 1m0s)")
}
