package split

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tflo-io/tflo/coordination"
	"github.com/tflo-io/tflo/streaming"
)

// SplitID names a split; it must be a valid coordination key token
// sequence (letters, digits, '_', '-', '=', dots between tokens) of at
// most 1018 bytes (its lease key, "lease.<id>", is a coordination key).
type SplitID string

// WorkerID names a worker (same alphabet as SplitID), at most 1017 bytes
// (its presence key, "worker.<id>", is a coordination key).
type WorkerID string

// Spec is the immutable description of a split.
type Spec struct {
	ID SplitID `json:"id"`
	// Weight is the split's relative cost for balancing (>= 1).
	Weight uint32 `json:"weight"`
	// Descriptor is opaque to the protocol (topics, partitions, a file
	// range).
	Descriptor []byte `json:"descriptor,omitempty"`
}

// Validate reports a spec that cannot be stored.
func (s Spec) Validate() error {
	if !coordination.ValidKey(string(s.ID)) || len(s.ID) > maxSplitIDLen {
		return fmt.Errorf("split id %s must be dot-separated tokens of [A-Za-z0-9_=-], at most %d bytes", coordination.QuoteKey(string(s.ID)), maxSplitIDLen)
	}
	if s.Weight == 0 {
		return fmt.Errorf("split %q: weight must be at least 1", s.ID)
	}
	return nil
}

// Status is the lifecycle state in a progress record.
type Status string

const (
	// StatusIdle: never claimed.
	StatusIdle Status = "idle"
	// StatusOwned: claimed by Owner at Epoch. If the owner's lease is gone
	// the tenancy failed (crash, pause, partition).
	StatusOwned Status = "owned"
	// StatusReleased: the last owner let go gracefully; the next claim
	// consumes no attempt.
	StatusReleased Status = "released"
	// StatusQuarantined: N consecutive tenancies failed without committing
	// progress; nobody claims it until an operator resets it.
	StatusQuarantined Status = "quarantined"
)

// Progress is the small mutable record of a split. Every change is a CAS at
// the writer's last-seen revision — the only correctness mechanism.
type Progress struct {
	Epoch  streaming.Epoch `json:"epoch"`
	Status Status          `json:"status"`
	Owner  WorkerID        `json:"owner,omitempty"`
	// Attempts counts consecutive failed tenancies; a commit resets it.
	Attempts uint32 `json:"attempts"`
	// Watermark and State are written together by Commit: the position the
	// source resumes after, and opaque source state.
	Watermark uint64 `json:"watermark"`
	State     []byte `json:"state,omitempty"`
}

// Lease is the ephemeral liveness marker of one tenancy.
type Lease struct {
	Owner    WorkerID        `json:"owner"`
	Instance string          `json:"instance"`
	Epoch    streaming.Epoch `json:"epoch"`
}

// Presence announces a live worker and its capacity (in weight units, 0 =
// unbounded).
type Presence struct {
	Worker   WorkerID `json:"worker"`
	Instance string   `json:"instance"`
	Capacity uint64   `json:"capacity"`
}

// Leader is the ephemeral leader key's value.
type Leader struct {
	Worker   WorkerID `json:"worker"`
	Instance string   `json:"instance"`
}

// Plan is the durable assignment published by the leader. Generation rises
// by one at every change of leader; a split absent from Assign is not
// reassigned (its holder keeps it).
type Plan struct {
	Generation uint64               `json:"generation"`
	Leader     WorkerID             `json:"leader"`
	Assign     map[SplitID]WorkerID `json:"assign"`
}

// Keys of the protocol. Durable: spec.<id>, prog.<id>, plan. Ephemeral:
// lease.<id>, worker.<id>, leader.
const (
	specPrefix     = "spec."
	progPrefix     = "prog."
	planKey        = "plan"
	leasePrefix    = "lease."
	presencePrefix = "worker."
	leaderKey      = "leader"
)

// The longest ids whose keys fit coordination.MaxKeyLen: a split's
// longest key is its lease, a worker's its presence. A longer id that is
// a valid key has keys the store refuses, as Fatal errors a claim or a
// registration cannot get past.
const (
	maxSplitIDLen  = coordination.MaxKeyLen - len(leasePrefix)
	maxWorkerIDLen = coordination.MaxKeyLen - len(presencePrefix)
)

func specKey(id SplitID) string        { return specPrefix + string(id) }
func progKey(id SplitID) string        { return progPrefix + string(id) }
func leaseKey(id SplitID) string       { return leasePrefix + string(id) }
func presenceKey(id WorkerID) string   { return presencePrefix + string(id) }
func idFrom(key, prefix string) string { return strings.TrimPrefix(key, prefix) }

func encode(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("split: encoding %T: %v", v, err)) // plain structs never fail
	}
	return b
}

func decode[T any](key string, b []byte) (T, error) {
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("%w: key %q (%d bytes) is not a %T: %v", ErrCorruptRecord, key, len(b), v, err)
	}
	return v, nil
}
