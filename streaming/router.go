package streaming

// Epoch is an ownership generation: the fencing token a shard's owner
// stamps on every durable write. It strictly increases with every ownership
// change, so a write carrying an older epoch comes from a zombie and loses.
type Epoch uint64

// ShardRouter decides which keys this process owns.
//
// AssignmentEpoch is strictly monotonic and bumps after every ownership
// change; callers read it before applying a record and drop records for
// keys they do not own, which fences out records that arrive during a
// rebalance window. Implementations are safe for concurrent use.
type ShardRouter[K any] interface {
	Owns(key K) bool
	AssignmentEpoch() Epoch
}

// LocalShard owns every key at a fixed epoch: the single-process default.
type LocalShard[K any] struct {
	Epoch Epoch
}

var _ ShardRouter[string] = LocalShard[string]{}

// Owns returns true.
func (LocalShard[K]) Owns(K) bool { return true }

// AssignmentEpoch returns the fixed epoch.
func (l LocalShard[K]) AssignmentEpoch() Epoch { return l.Epoch }
