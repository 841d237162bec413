package kafka

import (
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/tflo-io/tflo/streaming"
)

// Partition names one Kafka partition: the key type of [ShardRouter].
// A record's key (sensor id) belongs to exactly one partition (the
// producer hashes it), so owning a partition is owning its keys.
type Partition struct {
	Topic     string
	Partition int32
}

// String formats p as "topic/partition".
func (p Partition) String() string { return p.Topic + "/" + strconv.Itoa(int(p.Partition)) }

// ShardRouter is the streaming.ShardRouter of a consumer-group member,
// driven by the group's assign, revoke and lost callbacks.
//
// The epoch strictly increases and bumps after every ownership change. It
// is derived from the group generation: a change seen in generation g sets
// the epoch to max(epoch+1, g<<32). Generations increase across the whole
// group, so the owner that gains a partition in a later generation has a
// larger epoch than any epoch the previous owner stamped while it owned it;
// durable writes compare epochs to fence a zombie out.
//
// Owns is lock-free (an atomic pointer to an immutable ownership set) so
// the hot path can check it once per record. Safe for concurrent use.
type ShardRouter struct {
	mu      sync.Mutex // serialises changes
	state   atomic.Pointer[routerState]
	dropped atomic.Uint64
}

type routerState struct {
	epoch streaming.Epoch
	owned map[Partition]streaming.Epoch // partition -> epoch at which it was gained
}

var _ streaming.ShardRouter[Partition] = (*ShardRouter)(nil)

// NewShardRouter returns a router that owns nothing at epoch 0.
func NewShardRouter() *ShardRouter {
	r := &ShardRouter{}
	r.state.Store(&routerState{owned: map[Partition]streaming.Epoch{}})
	return r
}

// Owns reports whether this member currently owns p.
func (r *ShardRouter) Owns(p Partition) bool {
	_, ok := r.state.Load().owned[p]
	return ok
}

// OwnsAt reports whether this member owns p by an ownership that began at
// or before epoch and has not changed since: work scheduled at epoch for p
// is still valid.
func (r *ShardRouter) OwnsAt(p Partition, epoch streaming.Epoch) bool {
	since, ok := r.state.Load().owned[p]
	return ok && since <= epoch
}

// GainedAt returns the epoch at which this member gained p, and whether it
// owns p now.
func (r *ShardRouter) GainedAt(p Partition) (streaming.Epoch, bool) {
	since, ok := r.state.Load().owned[p]
	return since, ok
}

// AssignmentEpoch returns the current epoch.
func (r *ShardRouter) AssignmentEpoch() streaming.Epoch { return r.state.Load().epoch }

// Owned returns the owned partitions with the epoch each was gained at.
func (r *ShardRouter) Owned() map[Partition]streaming.Epoch {
	st := r.state.Load()
	out := make(map[Partition]streaming.Epoch, len(st.owned))
	for p, e := range st.owned {
		out[p] = e
	}
	return out
}

// Assign records that the member gained ps in group generation gen and
// returns the new epoch. An empty ps changes nothing and returns the
// current epoch.
func (r *ShardRouter) Assign(gen int32, ps ...Partition) streaming.Epoch {
	return r.change(gen, ps, true)
}

// Revoke records that the member gave up ps (a revoke or a lost
// assignment) in generation gen (-1 when unknown) and returns the new
// epoch.
func (r *ShardRouter) Revoke(gen int32, ps ...Partition) streaming.Epoch {
	return r.change(gen, ps, false)
}

func (r *ShardRouter) change(gen int32, ps []Partition, gain bool) streaming.Epoch {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.state.Load()
	if len(ps) == 0 {
		return old.epoch
	}
	epoch := old.epoch + 1
	if gen > 0 {
		epoch = max(epoch, streaming.Epoch(uint64(gen)<<32))
	}
	owned := make(map[Partition]streaming.Epoch, len(old.owned)+len(ps))
	for p, e := range old.owned {
		owned[p] = e
	}
	for _, p := range ps {
		if gain {
			owned[p] = epoch
		} else {
			delete(owned, p)
		}
	}
	r.state.Store(&routerState{epoch: epoch, owned: owned})
	return epoch
}

// CountDropped adds n records dropped because their partition was not
// owned when they arrived.
func (r *ShardRouter) CountDropped(n int) { r.dropped.Add(uint64(n)) }

// Dropped returns how many records were dropped because their partition
// was no longer owned (the rebalance window).
func (r *ShardRouter) Dropped() uint64 { return r.dropped.Load() }
