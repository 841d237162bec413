package activities

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"sync"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/tflo-io/tflo/streaming"
)

// Shards is the registry of the shards this worker serves, and the
// CheckpointHost over their streaming.Checkpointers: the worker registers
// a shard's Checkpointer when it gains the shard and unregisters it when it
// loses it; a round checkpoints the registered shards it names with
// streaming.CheckpointGroup (their writes batched per store). When rounds
// stop coming (Temporal unreachable, no coordinator) RunLocal checkpoints
// the shards on its own and the next round reports those checkpoints.
//
// Safe for concurrent use.
type Shards struct {
	now func() time.Time

	mu        sync.RWMutex
	shards    map[shardKey]*streaming.Checkpointer
	released  map[shardKey]streaming.CheckpointStatus // the last status of each unregistered shard
	noFinal   map[shardKey]bool                       // unregistered without a final checkpoint (UnregisterWithoutFinal)
	local     map[shardKey]int                        // local checkpoints not yet reported to a round
	pipelines map[string]*CoordinatorView
	// ageChanged is closed (and replaced) when a round changes a
	// pipeline's MaxCheckpointAge, so RunLocal checks at its new cadence.
	ageChanged chan struct{}
}

type shardKey struct {
	pipeline string
	shard    streaming.ShardID
}

// CoordinatorView is what a worker knows of its pipeline's checkpoint
// coordinator: the metrics a worker exports come from it.
type CoordinatorView struct {
	// Round is the last round this worker answered (0: none yet).
	Round uint64
	// LastRoundAt is when it answered it (or when RunLocal started).
	LastRoundAt time.Time
	// Breaker is the coordinator's breaker as last told ("closed" until a
	// round or a notice says otherwise).
	Breaker string
	// PausedUntil is the end of an open breaker's cool-down.
	PausedUntil time.Time
	// MaxCheckpointAge is the coordinator's setting, once a round told it.
	MaxCheckpointAge time.Duration
	// LocalCheckpoints counts the shard checkpoints taken without a round.
	LocalCheckpoints int64
}

// ShardsOption configures Shards.
type ShardsOption func(*Shards)

// WithShardsClock sets the clock of round and local-checkpoint bookkeeping
// (default time.Now).
func WithShardsClock(now func() time.Time) ShardsOption { return func(r *Shards) { r.now = now } }

// NewShards returns an empty registry.
func NewShards(opts ...ShardsOption) *Shards {
	r := &Shards{
		now:    time.Now,
		shards: make(map[shardKey]*streaming.Checkpointer), released: map[shardKey]streaming.CheckpointStatus{},
		noFinal: map[shardKey]bool{}, local: map[shardKey]int{}, pipelines: map[string]*CoordinatorView{},
		ageChanged: make(chan struct{}),
	}
	for _, o := range opts {
		o(r)
	}
	return r
}

var _ CheckpointHost = (*Shards)(nil)

// Register makes cp serve the stages of pipeline/shard.
func (r *Shards) Register(pipeline string, shard streaming.ShardID, cp *streaming.Checkpointer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := shardKey{pipeline, shard}
	r.shards[k] = cp
	delete(r.released, k)
	delete(r.noFinal, k)
	if v := r.pipelines[pipeline]; v != nil {
		cp.ReportBreaker(breakerState(v.Breaker))
	}
}

// Unregister stops serving pipeline/shard (the worker lost it). Its last
// checkpoint is kept for a handoff's final round.
func (r *Shards) Unregister(pipeline string, shard streaming.ShardID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	k := shardKey{pipeline, shard}
	if cp, ok := r.shards[k]; ok {
		r.released[k] = cp.Status()
	}
	delete(r.shards, k)
	delete(r.local, k)
	delete(r.noFinal, k)
}

// UnregisterWithoutFinal is Unregister for a shard the worker released
// without a final checkpoint (a lost partition, a final checkpoint that
// failed): a handoff's final round of it is then answered ShardNotOwner,
// saying so, instead of passing its last checkpoint off as the final one.
func (r *Shards) UnregisterWithoutFinal(pipeline string, shard streaming.ShardID) {
	r.Unregister(pipeline, shard)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.noFinal[shardKey{pipeline, shard}] = true
}

// Coordinator returns what this worker knows of pipeline's coordinator.
func (r *Shards) Coordinator(pipeline string) CoordinatorView {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if v := r.pipelines[pipeline]; v != nil {
		return *v
	}
	return CoordinatorView{Breaker: "closed"}
}

// view returns pipeline's view (r.mu held for writing).
func (r *Shards) view(pipeline string) *CoordinatorView {
	v := r.pipelines[pipeline]
	if v == nil {
		v = &CoordinatorView{Breaker: "closed"}
		r.pipelines[pipeline] = v
	}
	return v
}

// setBreaker records the coordinator's breaker and reports it to every
// Checkpointer of pipeline, whose Status is what metrics read; a breaker
// not open ends the cool-down a notice gave (r.mu held).
func (r *Shards) setBreaker(pipeline, state string) {
	v := r.view(pipeline)
	if state != "" && state != streaming.BreakerOpen.String() {
		// The breaker closed (or is probing) before the cool-down a
		// notice gave ended, as after an early probe round: the pause is
		// over, for local checkpoints and the re-announce alike.
		v.PausedUntil = time.Time{}
	}
	if state == "" || state == v.Breaker {
		return
	}
	v.Breaker = state
	for k, cp := range r.shards {
		if k.pipeline == pipeline {
			cp.ReportBreaker(breakerState(state))
		}
	}
}

func breakerState(s string) streaming.BreakerState {
	switch s {
	case streaming.BreakerOpen.String():
		return streaming.BreakerOpen
	case streaming.BreakerHalfOpen.String():
		return streaming.BreakerHalfOpen
	}
	return streaming.BreakerClosed
}

// CheckpointRound implements CheckpointHost over the registered
// Checkpointers.
func (r *Shards) CheckpointRound(ctx context.Context, in RoundInput) (RoundResult, error) {
	start := r.now()
	res := RoundResult{Round: in.Round, WorkerID: in.WorkerID, Shards: make([]ShardResult, len(in.Shards))}
	var members []streaming.GroupMember
	var at []int
	r.mu.Lock()
	r.setBreaker(in.Pipeline, in.Breaker)
	if v := r.view(in.Pipeline); in.MaxCheckpointAge > 0 && v.MaxCheckpointAge != in.MaxCheckpointAge.D() {
		v.MaxCheckpointAge = in.MaxCheckpointAge.D()
		close(r.ageChanged)
		r.ageChanged = make(chan struct{})
	}
	for i, se := range in.Shards {
		k := shardKey{in.Pipeline, se.Shard}
		res.Shards[i] = ShardResult{Shard: se.Shard, Epoch: se.Epoch}
		if cp, ok := r.shards[k]; ok {
			members = append(members, streaming.GroupMember{Checkpointer: cp, Epoch: se.Epoch})
			at = append(at, i)
			continue
		}
		if st, ok := r.released[k]; ok && in.Final && st.LastEpoch == se.Epoch && st.LastID > 0 {
			if r.noFinal[k] {
				res.Shards[i].Status = ShardNotOwner
				res.Shards[i].Error = fmt.Sprintf("worker %q released shard %s/%s without a final checkpoint (the partition was lost, or its final checkpoint failed): its next owner replays from checkpoint %d",
					in.WorkerID, in.Pipeline, se.Shard, uint64(st.LastID))
				continue
			}
			res.Shards[i] = shardOK(se.Shard, st)
			continue
		}
		res.Shards[i].Status = ShardNotOwner
		res.Shards[i].Error = fmt.Sprintf("worker %q does not serve shard %s/%s", in.WorkerID, in.Pipeline, se.Shard)
	}
	r.mu.Unlock()

	out := streaming.CheckpointGroup(ctx, members)
	if err := ctx.Err(); err != nil && len(members) > 0 {
		return RoundResult{}, err
	}
	r.mu.Lock()
	for j, o := range out {
		i, cp := at[j], members[j].Checkpointer
		sr := &res.Shards[i]
		k := shardKey{in.Pipeline, sr.Shard}
		sr.Local = r.local[k]
		delete(r.local, k)
		var notOwner *streaming.NotOwnerError
		switch {
		case o.Err == nil:
			local := sr.Local
			*sr = shardOK(sr.Shard, cp.Status())
			sr.Epoch, sr.Local = o.Result.Epoch, local
			sr.Bytes, sr.Duration = o.Result.Bytes, Duration(o.Result.Duration)
		case errors.As(o.Err, &notOwner), errors.Is(o.Err, streaming.ErrFenced):
			sr.Status, sr.Error = ShardNotOwner, o.Err.Error()
		default:
			sr.Status, sr.Error = ShardFailed, o.Err.Error()
			sr.CheckpointID = uint64(cp.Status().LastID)
		}
	}
	v := r.view(in.Pipeline)
	if in.Round > v.Round {
		v.Round = in.Round
	}
	v.LastRoundAt = r.now()
	r.mu.Unlock()
	res.Duration = Duration(r.now().Sub(start))
	return res, nil
}

func shardOK(shard streaming.ShardID, st streaming.CheckpointStatus) ShardResult {
	return ShardResult{Shard: shard, Epoch: st.LastEpoch, Status: ShardOK, CheckpointID: uint64(st.LastID),
		Cursor: st.LastCursor, Bytes: st.LastBytes, Duration: Duration(st.LastDuration),
		ArchivedRows: st.ArchivedRows, ArchivedBytes: st.ArchivedBytes}
}

// Notice implements CheckpointHost.
func (r *Shards) Notice(_ context.Context, n CoordinatorNotice) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.setBreaker(n.Pipeline, n.Breaker)
	v := r.view(n.Pipeline)
	v.PausedUntil = n.Until
	return nil
}

// RunLocal checkpoints pipeline's shards on their own whenever no round
// has come for maxAge (the coordinator's MaxCheckpointAge once a round
// told it; maxAge until then): Temporal being down degrades the cadence of
// checkpoints, not their safety. An open breaker's cool-down (a Notice) is
// not an outage and takes no local checkpoint. The next round reports the
// local checkpoints per shard (ShardResult.Local). It checks every
// quarter of the max age in force and blocks until ctx ends, returning
// ctx's error.
func (r *Shards) RunLocal(ctx context.Context, pipeline string, maxAge time.Duration) error {
	if maxAge <= 0 {
		return fmt.Errorf("local checkpoints of %s: max checkpoint age %v must be positive", pipeline, maxAge)
	}
	r.mu.Lock()
	if v := r.view(pipeline); v.LastRoundAt.IsZero() {
		v.LastRoundAt = r.now()
	}
	r.mu.Unlock()
	// The cadence follows the coordinator's max age once a round told it:
	// a quarter of a longer default would leave the worker that long
	// without a checkpoint.
	cadence := func() (time.Duration, <-chan struct{}) {
		r.mu.RLock()
		defer r.mu.RUnlock()
		age := maxAge
		if v := r.pipelines[pipeline]; v.MaxCheckpointAge > 0 {
			age = v.MaxCheckpointAge
		}
		return max(age/4, time.Millisecond), r.ageChanged
	}
	every, changed := cadence()
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
			every, changed = cadence()
			t.Reset(every)
		case <-t.C:
			r.localOnce(ctx, pipeline, maxAge)
		}
	}
}

// localOnce takes one local checkpoint of pipeline's shards if one is due.
func (r *Shards) localOnce(ctx context.Context, pipeline string, maxAge time.Duration) {
	now := r.now()
	r.mu.Lock()
	v := r.view(pipeline)
	if v.MaxCheckpointAge > 0 {
		maxAge = v.MaxCheckpointAge
	}
	due := now.Sub(v.LastRoundAt) >= maxAge && !now.Before(v.PausedUntil)
	var members []streaming.GroupMember
	var keys []shardKey
	if due {
		for k, cp := range r.shards {
			if e, owns := cp.Owner(); k.pipeline == pipeline && owns {
				members = append(members, streaming.GroupMember{Checkpointer: cp, Epoch: e})
				keys = append(keys, k)
			}
		}
		// Counted from now: the next local checkpoint is due maxAge later
		// unless a round comes first.
		v.LastRoundAt = now
	}
	r.mu.Unlock()
	if len(members) == 0 {
		return
	}
	out := streaming.CheckpointGroup(ctx, members)
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, o := range out {
		if o.Err == nil {
			if _, still := r.shards[keys[i]]; still {
				r.local[keys[i]]++
			}
			r.view(pipeline).LocalCheckpoints++
		}
	}
}

// classify maps streaming errors to Temporal application errors: fencing
// and ordering errors are non-retryable, everything else retries — a
// state store's lost commit race among them (streaming.ErrConflict does
// not wrap streaming.ErrFenced) unless a newer owner won it, which the
// Checkpointer reports as a NotOwnerError: the retry rereads, and the
// epochs the Checkpointer checks decide whether this worker is the stale
// one.
func classify(err error) error {
	var notOwner *streaming.NotOwnerError
	switch {
	case errors.As(err, &notOwner), errors.Is(err, streaming.ErrFenced):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeNotOwner, nil)
	case errors.Is(err, streaming.ErrStateNotSaved), errors.Is(err, streaming.ErrUnknownCheckpoint):
		return temporal.NewNonRetryableApplicationError(err.Error(), ErrTypeOutOfOrder, nil)
	}
	return err
}

// FormatCursor renders a cursor for workflow state and the web UI. An
// MQTT cursor is its dedup window and retained map (8 bytes per window
// entry, kilobytes at the default capacities): it is summarised, as the
// hex of it would fill the status table, the coordinator's shard rows
// (its queries and continue-as-new input) and every checkpoint's
// activity result in the history. Cursors of other types are hex,
// shortened past maxCursorHex bytes.
func FormatCursor(cursorType string, b []byte) string {
	if len(b) == 0 {
		return ""
	}
	switch cursorType {
	case streaming.CursorTypeKafka:
		if k, err := streaming.ParseKafkaOffset(b); err == nil {
			return k.String()
		}
	case streaming.CursorTypeMQTT:
		if c, err := streaming.ParseMQTTCursor(b); err == nil {
			s := c.String()
			if seq, ok := c.NewestRetainedSeq(); ok {
				s += " newest-ts=" + strconv.FormatUint(seq, 10)
			}
			return s
		}
	}
	if len(b) > maxCursorHex {
		return fmt.Sprintf("%s:%s…(%d bytes, fnv %016x)", cursorType, hex.EncodeToString(b[:maxCursorHex]), len(b), fnv64(b))
	}
	return cursorType + ":" + hex.EncodeToString(b)
}

// maxCursorHex is how many bytes of a cursor FormatCursor shows in hex.
const maxCursorHex = 32

func fnv64(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}
