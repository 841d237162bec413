package pipeline

import (
	"context"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/streaming"
)

// Registered reports whether w holds its presence lease in its
// coordination store.
func Registered(w *Worker) bool {
	m := w.member.Load()
	return m != nil && m.sw.Err() == nil
}

// LastRenewal is when w's presence lease was last renewed.
func LastRenewal(w *Worker) time.Time { return w.member.Load().sw.LastRenewal() }

// CrashOnStop makes w's MQTT source stop like a crash: no final
// checkpoint.
func CrashOnStop(w *Worker) { w.crashOnStop.Store(true) }

// KeyState returns a fresh instance of w's graph loaded with key's state
// in the MQTT shard (nil when the key has none).
func KeyState(w *Worker, key string) (*streaming.Instance, error) {
	b, found, err := w.mqtt.cur.Load().rt.Get(key)
	if err != nil || !found {
		return nil, err
	}
	in := w.c.g.NewInstance()
	return in, in.Load(b)
}

// WithCheckpointObserver tells f of every completed checkpoint, with the
// shard's status after it (LastDuration is its duration).
func WithCheckpointObserver(f func(streaming.ShardID, streaming.CheckpointStatus)) Option {
	return func(o *options) { o.checkpointed = f }
}

// WithStallObserver tells f of each stall an MQTT source with
// AckOnCheckpoint checkpoints for (checkpointOnStall), with the source's
// received and pending counts when it was seen.
func WithStallObserver(f func(received uint64, pending int)) Option {
	return func(o *options) { o.stalled = f }
}

// QuickWatchFailure is how soon a failed watch of the lease workflow is
// taken for one refused at once (quickWatchFailure).
const QuickWatchFailure = quickWatchFailure

// WithLeaseWaitObserver tells f of each wait before a probe of Temporal
// after a failed watch of the lease workflow (awaitTemporal).
func WithLeaseWaitObserver(f func(time.Duration)) Option {
	return func(o *options) { o.leaseWaits = f }
}

// FinalRound runs a handoff's final round of shard at epoch on w (what
// the coordinator's handoff asks the old owner).
func FinalRound(ctx context.Context, w *Worker, shard streaming.ShardID, epoch streaming.Epoch) (activities.ShardResult, error) {
	res, err := w.host.shards.CheckpointRound(ctx, activities.RoundInput{Pipeline: w.c.p.Name, WorkerID: w.o.workerID, Final: true,
		Shards: []activities.ShardEpoch{{Shard: shard, Epoch: epoch}}})
	if err != nil || len(res.Shards) != 1 {
		return activities.ShardResult{}, err
	}
	return res.Shards[0], nil
}

// ShardFolderName is the folder of a shard inside a durable folder.
func ShardFolderName(id streaming.ShardID) string { return shardFolderName(id) }

// ClaimEpoch claims the epoch of a new run of shard id on w, whose
// checkpoint was restored at epoch restored (Worker.claimEpoch).
func ClaimEpoch(ctx context.Context, w *Worker, id streaming.ShardID, restored streaming.Epoch) (streaming.Epoch, error) {
	return w.claimEpoch(ctx, id, restored, w.durable)
}

// EpochKey is the coordination key of a shard's claimed epoch.
func EpochKey(pipeline string, id streaming.ShardID) string { return epochKey(pipeline, id) }

// CoordEpochs is the epoch claimer on a coordination store that
// claimEpoch uses when the worker has one.
func CoordEpochs(s coordination.Store) streaming.EpochClaimer { return coordEpochs{s} }

// DeadLetterKafkaSink is DeadLetterKafka.sink, for the round-trip test.
func DeadLetterKafkaSink(d DeadLetterKafka) KafkaSink { return d.sink() }

// StateKeys counts the keys shard id keeps in w's state database.
func StateKeys(w *Worker, id streaming.ShardID) (int, error) {
	n := 0
	err := w.db.View(func(txn *badger.Txn) error {
		opts := badger.DefaultIteratorOptions
		opts.PrefetchValues = false
		opts.Prefix = w.statePrefix(id)
		it := txn.NewIterator(opts)
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			n++
		}
		return nil
	})
	return n, err
}
