package workflows

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/streaming"
)

// Breaker states of a pipeline's coordinator (and of the TfloBreakerState
// search attribute).
const (
	BreakerClosed   = "closed"
	BreakerOpen     = "open"
	BreakerHalfOpen = "half-open"
)

// Owner is who owns a shard: the worker tells the coordinator itself
// (an announcement) when it gains the shard. Ownership is decided on the
// data plane, never by a workflow.
type Owner struct {
	WorkerID  string          `json:"worker_id"`
	TaskQueue string          `json:"task_queue"`
	Epoch     streaming.Epoch `json:"epoch"`
}

// CoordinatorInput starts (or continues) the checkpoint coordinator of a
// pipeline. Zero durations and counts take the defaults documented on each
// field; durations read and write as text ("10s").
type CoordinatorInput struct {
	Pipeline string `json:"pipeline"`
	// Interval between rounds (default 10s).
	Interval activities.Duration `json:"interval,omitempty"`
	// Manual runs rounds only when asked (checkpoint now), never on the
	// interval.
	Manual bool `json:"manual,omitempty"`
	// ReachTimeout is how long a worker has to pick its share of a round
	// up (schedule-to-start). A worker that has not is unreachable for
	// that round: a liveness matter for its lease and the handoff, never
	// a storage failure (default: Interval, at least 1s).
	ReachTimeout activities.Duration `json:"reach_timeout,omitempty"`
	// RoundTimeout bounds one worker's share once started (start-to-close;
	// default 2m). A share that runs past it counts as a storage failure,
	// as an expired checkpoint does in Flink.
	RoundTimeout activities.Duration `json:"round_timeout,omitempty"`
	// BreakerThreshold consecutive rounds with storage failures open the
	// breaker (default 3).
	BreakerThreshold int `json:"breaker_threshold,omitempty"`
	// BreakerCoolDown is how long an open breaker holds rounds off before
	// one probe round (default 1m).
	BreakerCoolDown activities.Duration `json:"breaker_cool_down,omitempty"`
	// MaxCheckpointAge is how long a worker may go without a round before
	// it checkpoints on its own (default 3 × Interval); told to workers in
	// every round and announcement.
	MaxCheckpointAge activities.Duration `json:"max_checkpoint_age,omitempty"`
	// HandoffStepTimeout is the step timeout of the handoffs the
	// coordinator starts (default: the handoff's, 2m).
	HandoffStepTimeout activities.Duration `json:"handoff_step_timeout,omitempty"`
	// ContinueAsNewAfter rounds in one run (default 500; earlier when the
	// server suggests it or the run's history passes 10,000 events).
	ContinueAsNewAfter int `json:"continue_as_new_after,omitempty"`
	// State carries the coordinator across continue-as-new.
	State *CoordinatorState `json:"state,omitempty"`
}

// Validate reports the first problem with the input, as a sentence.
func (in CoordinatorInput) Validate() error {
	switch {
	case in.Pipeline == "":
		return errors.New("checkpoint coordinator: pipeline is empty")
	case in.Interval < 0, in.ReachTimeout < 0, in.RoundTimeout < 0, in.BreakerCoolDown < 0, in.MaxCheckpointAge < 0, in.HandoffStepTimeout < 0:
		return fmt.Errorf("checkpoint coordinator of %s: durations must not be negative", in.Pipeline)
	case in.BreakerThreshold < 0, in.ContinueAsNewAfter < 0:
		return fmt.Errorf("checkpoint coordinator of %s: counts must not be negative", in.Pipeline)
	}
	return nil
}

// WithDefaults returns in with every zero field at its default.
func (in CoordinatorInput) WithDefaults() CoordinatorInput {
	def := func(d *activities.Duration, v time.Duration) {
		if *d == 0 {
			*d = activities.Duration(v)
		}
	}
	def(&in.Interval, 10*time.Second)
	def(&in.ReachTimeout, max(in.Interval.D(), time.Second))
	def(&in.RoundTimeout, activities.DefaultRoundTimeout)
	def(&in.BreakerCoolDown, time.Minute)
	def(&in.MaxCheckpointAge, 3*in.Interval.D())
	if in.BreakerThreshold == 0 {
		in.BreakerThreshold = 3
	}
	if in.ContinueAsNewAfter == 0 {
		in.ContinueAsNewAfter = 500
	}
	return in
}

// Announcement is a worker telling the coordinator which shards it owns
// (update-with-start of UpdateAnnounce). It is idempotent: announcing a
// shard again at the same epoch changes nothing.
type Announcement struct {
	WorkerID  string `json:"worker_id"`
	TaskQueue string `json:"task_queue"`
	// Shards the worker owns now, each at the epoch the data plane gave it.
	Shards []activities.ShardEpoch `json:"shards,omitempty"`
	// Released are shards the worker no longer owns (optional: the next
	// owner's announcement supersedes them anyway).
	Released []activities.ShardEpoch `json:"released,omitempty"`
	// Instance names the worker's run (one per process), which its lease
	// workflow's worker-gone notice names too: a notice of an earlier run
	// of the same worker id is stale. Optional (earlier releases sent
	// none; a notice is then applied whatever run it is about).
	Instance string `json:"instance,omitempty"`
}

// PreviousOwner is who owned an announced shard before the announcing
// worker; Gone says its lease workflow declared it dead.
type PreviousOwner struct {
	Shard streaming.ShardID `json:"shard"`
	Owner Owner             `json:"owner"`
	Gone  bool              `json:"gone,omitempty"`
	// Handoff is the id of the handoff the coordinator started for the
	// move.
	Handoff string `json:"handoff,omitempty"`
}

// AnnounceResult answers an announcement.
type AnnounceResult struct {
	// Coordinator identifies the coordinator's chain of runs (the first
	// run's id; continue-as-new keeps it). When it changes the coordinator
	// was started afresh (after a stop) and knows nothing: announce every
	// shard held again.
	Coordinator string `json:"coordinator"`
	// Previous lists the announced shards that another worker owned.
	Previous []PreviousOwner `json:"previous,omitempty"`
	// Round is the last round the coordinator started.
	Round uint64 `json:"round"`
	// Breaker is the coordinator's breaker now.
	Breaker string `json:"breaker"`
	// BreakerUntil is, while Breaker is open, when its cool-down ends (no
	// round before): what the breaker's notice told the workers that
	// held shards when it opened.
	BreakerUntil time.Time `json:"breaker_until,omitzero"`
	// Interval and MaxCheckpointAge are the coordinator's settings, for
	// the worker's local checkpoints when rounds stop coming.
	Interval         activities.Duration `json:"interval"`
	MaxCheckpointAge activities.Duration `json:"max_checkpoint_age"`
}

// WorkerGone is what a lease workflow tells the coordinator when its
// worker's heartbeat timed out (SignalWorkerGone).
type WorkerGone struct {
	WorkerID string `json:"worker_id"`
	// Shards the worker held at its last heartbeat.
	Shards []activities.ShardEpoch `json:"shards,omitempty"`
	Reason string                  `json:"reason,omitempty"`
	// Instance is the worker's run the lease watched (LeaseInput.Instance;
	// empty from lease workflows of earlier releases). A notice about
	// another run than the one that announced last is stale and ignored:
	// the worker was replaced under the same id, and its new run owns
	// what it announced.
	Instance string `json:"instance,omitempty"`
}

// CheckpointNowRequest is the argument of UpdateCheckpointNow.
type CheckpointNowRequest struct {
	Reason string `json:"reason,omitempty"`
}

// StopRequest is the payload of SignalStop to a coordinator or a lease
// workflow.
type StopRequest struct {
	Reason string `json:"reason,omitempty"`
}

// Shard statuses in the coordinator's table.
const (
	// ShardNew: announced, not checkpointed by its owner yet.
	ShardNew = "new"
	// ShardOK, ShardFailed, ShardNotOwner: the outcome of its last round
	// (see package activities).
	ShardOK       = activities.ShardOK
	ShardFailed   = activities.ShardFailed
	ShardNotOwner = activities.ShardNotOwner
	// ShardUnreachable: its owner did not pick the last round up in time.
	ShardUnreachable = "unreachable"
	// ShardWorkerError: its owner could not run the last round at all
	// (closing, or not serving rounds): not a storage failure.
	ShardWorkerError = "worker-error"
	// ShardOwnerGone: its owner was declared dead; waiting for the next.
	ShardOwnerGone = "owner-gone"
	// ShardReleased: its owner released it; waiting for the next.
	ShardReleased = "released"
)

// ShardRow is one line of the coordinator's per-shard table (QueryShards).
type ShardRow struct {
	Shard  streaming.ShardID `json:"shard"`
	Owner  Owner             `json:"owner"`
	Status string            `json:"status"`
	// Round is the last round that checkpointed the shard.
	Round        uint64              `json:"round,omitempty"`
	CheckpointID uint64              `json:"checkpoint_id,omitempty"`
	Cursor       string              `json:"cursor,omitempty"`
	Bytes        int64               `json:"bytes,omitempty"`
	Duration     activities.Duration `json:"duration,omitempty"`
	// At is when its last checkpoint was recorded (workflow time).
	At time.Time `json:"at,omitzero"`
	// Local counts checkpoints its owners took without a round.
	Local int64  `json:"local,omitempty"`
	Error string `json:"error,omitempty"`
	// Handoff describes the last move of the shard.
	Handoff string `json:"handoff,omitempty"`
}

// ShardsPageRequest asks for a page of the coordinator's per-shard table
// (QueryShardsPage).
type ShardsPageRequest struct {
	// After is the last shard of the previous page ("": from the first).
	After streaming.ShardID `json:"after,omitempty"`
	// Limit is the most rows wanted (0 or less: MaxShardsPage, also its
	// cap).
	Limit int `json:"limit,omitempty"`
}

// ShardsPage is a page of the coordinator's per-shard table: the rows
// after the request's shard, sorted by shard.
type ShardsPage struct {
	Rows []ShardRow `json:"rows"`
	// More says rows remain after the page's last (ask again with After
	// set to its shard).
	More bool `json:"more,omitempty"`
}

// MaxShardsPage is the most rows a page of the per-shard table holds:
// about 450 KB of rows as a long-running pipeline has them, under
// Temporal's 512 KB warning; a page also stops before its rows pass
// maxShardsPageBytes (long errors), so it stays under the 2 MB limit on
// a query's answer.
const MaxShardsPage = 1000

// maxShardsPageBytes bounds a page's rows as JSON, as rowJSONBound
// reckons them (a page has at least one row).
const maxShardsPageBytes = 1 << 20

// rowJSONBound is at least the size of r as JSON: its keys, numbers and
// time in fixed room, its strings as if every byte JSON escapes were
// escaped (\u003c: 6 bytes) and every other non-ASCII byte doubled.
// Counted, not encoded: encoding/json is not for workflow code
// (workflowcheck), and a query handler is workflow code.
func rowJSONBound(r ShardRow) int {
	const fixed = 400
	n := fixed
	for _, s := range []string{string(r.Shard), r.Owner.WorkerID, r.Owner.TaskQueue, r.Status, r.Cursor, r.Error, r.Handoff} {
		for i := 0; i < len(s); i++ {
			switch b := s[i]; {
			case b < 0x20 || b == '"' || b == '\\' || b == '<' || b == '>' || b == '&':
				n += 6
			case b >= 0x80:
				n += 2
			default:
				n++
			}
		}
	}
	return n
}

// shardIndex finds shard in rows sorted by shard: its index, or where it
// would be inserted, and whether it is there.
func shardIndex(rows []ShardRow, shard streaming.ShardID) (int, bool) {
	return slices.BinarySearchFunc(rows, shard, func(r ShardRow, s streaming.ShardID) int { return strings.Compare(string(r.Shard), string(s)) })
}

// shardsPage returns the page of rows (sorted by shard) that req asks for.
func shardsPage(rows []ShardRow, req ShardsPageRequest) ShardsPage {
	limit := req.Limit
	if limit <= 0 || limit > MaxShardsPage {
		limit = MaxShardsPage
	}
	i := 0
	if req.After != "" {
		var found bool
		i, found = shardIndex(rows, req.After)
		if found {
			i++
		}
	}
	page := ShardsPage{Rows: []ShardRow{}}
	size := 0
	for ; i < len(rows) && len(page.Rows) < limit; i++ {
		b := rowJSONBound(rows[i])
		if len(page.Rows) > 0 && size+b > maxShardsPageBytes {
			break
		}
		size += b
		page.Rows = append(page.Rows, rows[i])
	}
	page.More = i < len(rows)
	return page
}

// Worker statuses in the coordinator's table.
const (
	WorkerLive        = "live"
	WorkerUnreachable = "unreachable"
	WorkerGoneStatus  = "gone"
)

// WorkerRow is one worker as the coordinator knows it.
type WorkerRow struct {
	WorkerID  string `json:"worker_id"`
	TaskQueue string `json:"task_queue"`
	Status    string `json:"status"`
	Shards    int    `json:"shards"`
	// LastRound is the last round the worker answered.
	LastRound uint64 `json:"last_round,omitempty"`
	// Unreachable counts consecutive rounds it did not pick up.
	Unreachable int `json:"unreachable,omitempty"`
	// Instance is the worker's run that announced last
	// (Announcement.Instance).
	Instance string `json:"instance,omitempty"`
}

// RoundSummary is what one round did; checkpoint now returns it, and the
// web UI shows it as the coordinator's current details.
type RoundSummary struct {
	Round     uint64              `json:"round"`
	Reason    string              `json:"reason"`
	StartedAt time.Time           `json:"started_at"`
	Duration  activities.Duration `json:"duration"`
	Workers   int                 `json:"workers"`
	Shards    int                 `json:"shards"`
	OK        int                 `json:"ok"`
	// Failed shards failed on storage; Unreachable ones were on workers
	// that did not pick the round up or were declared gone while it ran;
	// NotOwner ones had moved on; Moved ones changed owner while the round
	// ran (their results discarded).
	Failed      int `json:"failed"`
	Unreachable int `json:"unreachable,omitempty"`
	// WorkerErrors are shards whose worker failed the round as a whole.
	WorkerErrors int   `json:"worker_errors,omitempty"`
	NotOwner     int   `json:"not_owner,omitempty"`
	Moved        int   `json:"moved,omitempty"`
	Bytes        int64 `json:"bytes"`
	// ArchivedRows and ArchivedBytes are what the round's checkpoints
	// committed to the Parquet archive.
	ArchivedRows  int64  `json:"archived_rows,omitempty"`
	ArchivedBytes int64  `json:"archived_bytes,omitempty"`
	Local         int    `json:"local,omitempty"`
	Breaker       string `json:"breaker"`
	// Cut says the round was cut short (the coordinator was stopped).
	Cut bool `json:"cut,omitempty"`
}

// String is the one-line story of the round, as the web UI shows it:
// "round 1234: 12 workers, 480 shards, 3.2 MB, 850ms, 0 failed".
func (s RoundSummary) String() string {
	out := fmt.Sprintf("round %d: %d workers, %d shards, %s, %s, %d failed", s.Round, s.Workers, s.Shards, HumanBytes(s.Bytes),
		s.Duration.D().Round(time.Millisecond), s.Failed)
	if s.Unreachable > 0 {
		out += fmt.Sprintf(", %d unreachable", s.Unreachable)
	}
	if s.WorkerErrors > 0 {
		out += fmt.Sprintf(", %d on failing workers", s.WorkerErrors)
	}
	if s.NotOwner+s.Moved > 0 {
		out += fmt.Sprintf(", %d moved", s.NotOwner+s.Moved)
	}
	if s.ArchivedRows > 0 {
		out += fmt.Sprintf(", archived %d rows (%s)", s.ArchivedRows, HumanBytes(s.ArchivedBytes))
	}
	if s.Local > 0 {
		out += fmt.Sprintf(", %d local checkpoints reconciled", s.Local)
	}
	if s.Cut {
		out += " (cut short by stop)"
	}
	return out
}

// HumanBytes renders n as "3.2 MB" (decimal units).
func HumanBytes(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	v := float64(n) / float64(div)
	// 999,999 bytes is 999.999 kB, which one decimal rounds to "1000.0
	// kB": the next unit says it.
	if v >= unit-0.05 && exp < len("kMGTPE")-1 {
		v /= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", v, "kMGTPE"[exp])
}

// CoordinatorState is the coordinator's memory, carried across
// continue-as-new: owners and the last checkpoint of every shard, the
// workers, the breaker and the counters.
//
// Within a run the per-shard table is Shards (QueryShards). Across
// continue-as-new and in the result at stop, past 1,000 shards, it is
// folded into Groups and Notes instead (Shards is then empty; Table
// unfolds it; a smaller table travels whole, as earlier builds read it), so that the
// payload grows by a shard's name and checkpoint id per shard, about 35
// bytes as JSON, not by its whole row (about 450 bytes, past Temporal's
// 2 MB payload limit from some 4,700 shards). Dropped on the way: the cursor,
// bytes and duration of each shard's last checkpoint (the next round that
// checkpoints it refreshes them), and the error and handoff of all but
// maxCarriedNotes shards. An input of an earlier build, whose Shards holds
// the whole table, is taken as it is.
type CoordinatorState struct {
	Pipeline string `json:"pipeline"`
	// Round is the number of the last round started.
	Round uint64 `json:"round"`
	// Rounds by outcome: every shard checkpointed; some shards not
	// (unreachable or moved), none failed; some failed on storage.
	Complete uint64 `json:"complete"`
	Partial  uint64 `json:"partial"`
	Failed   uint64 `json:"failed"`
	// LocalCheckpoints sums the checkpoints workers took without a round.
	LocalCheckpoints int64 `json:"local_checkpoints,omitempty"`

	Breaker             string    `json:"breaker"`
	ConsecutiveFailures int       `json:"consecutive_failures,omitempty"`
	BreakerOpenedAt     time.Time `json:"breaker_opened_at,omitzero"`
	LastError           string    `json:"last_error,omitempty"`
	// SearchBreaker is the breaker state last upserted as a search
	// attribute (upserts happen only on change).
	SearchBreaker string `json:"search_breaker,omitempty"`

	Workers []WorkerRow `json:"workers,omitempty"`
	// Shards is the per-shard table, sorted by shard, within a run.
	Shards []ShardRow `json:"shards,omitempty"`
	// Groups and Notes carry the table across continue-as-new and in the
	// result at stop (see Table).
	Groups []ShardGroup  `json:"shard_groups,omitempty"`
	Notes  []ShardNote   `json:"shard_notes,omitempty"`
	Last   *RoundSummary `json:"last,omitempty"`
	// Generation counts continue-as-new runs.
	Generation int `json:"generation,omitempty"`
}

// CoordinatorStatus is what QueryStatus returns: the state without the
// per-shard table (QueryShards returns that).
type CoordinatorStatus struct {
	CoordinatorState
	// InFlight is the round running now, if any.
	InFlight *RoundSummary `json:"in_flight,omitempty"`
	// NextRoundAt is when the next round is due (zero: manual, or a round
	// is running).
	NextRoundAt time.Time `json:"next_round_at,omitzero"`
	Stopping    bool      `json:"stopping,omitempty"`
}

// ShardGroup is the shards that share their owner, status, last round and
// when it was recorded: the per-shard table as continue-as-new carries it
// (CoordinatorState.Groups). A worker's shards of one round share all
// four, so a pipeline's table is a few groups per worker.
type ShardGroup struct {
	Owner  Owner     `json:"owner"`
	Status string    `json:"status"`
	Round  uint64    `json:"round,omitempty"`
	At     time.Time `json:"at,omitzero"`
	// Shards are the group's shards, sorted.
	Shards []streaming.ShardID `json:"shards"`
	// CheckpointIDs and Local are each shard's, in the order of Shards
	// (omitted when all are zero).
	CheckpointIDs []uint64 `json:"checkpoint_ids,omitempty"`
	Local         []int64  `json:"local,omitempty"`
}

// ShardNote is the error and handoff of one shard's row, carried with its
// group (CoordinatorState.Notes).
type ShardNote struct {
	Shard   streaming.ShardID `json:"shard"`
	Error   string            `json:"error,omitempty"`
	Handoff string            `json:"handoff,omitempty"`
}

// maxCarriedNotes bounds the errors and handoffs carried across
// continue-as-new and in the result at stop (a few hundred bytes each):
// handoffs still running come first, as their rows name the workflow that
// holds their result; then other rows with an error or a handoff, in shard
// order.
const maxCarriedNotes = 256

// Table returns the per-shard table, sorted by shard: Shards, and the
// rows Groups and Notes carry (CheckpointIDs and Local beyond a group's
// shards are ignored; missing ones are zero).
func (st CoordinatorState) Table() []ShardRow {
	if len(st.Groups) == 0 {
		return st.Shards
	}
	n := len(st.Shards)
	for _, g := range st.Groups {
		n += len(g.Shards)
	}
	unsorted := make([]ShardRow, 0, n)
	unsorted = append(unsorted, st.Shards...)
	for _, g := range st.Groups {
		for i, shard := range g.Shards {
			row := ShardRow{Shard: shard, Owner: g.Owner, Status: g.Status, Round: g.Round, At: g.At}
			if i < len(g.CheckpointIDs) {
				row.CheckpointID = g.CheckpointIDs[i]
			}
			if i < len(g.Local) {
				row.Local = g.Local[i]
			}
			unsorted = append(unsorted, row)
		}
	}
	// Sorted by index: a row is some 200 bytes to swap.
	order := make([]int, len(unsorted))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(string(unsorted[a].Shard), string(unsorted[b].Shard)) })
	rows := make([]ShardRow, len(order))
	for i, j := range order {
		rows[i] = unsorted[j]
	}
	for _, n := range st.Notes {
		i, ok := shardIndex(rows, n.Shard)
		if ok {
			rows[i].Error, rows[i].Handoff = n.Error, n.Handoff
		}
	}
	return rows
}

// foldShardsAbove: a table of at most this many shards travels whole, as
// earlier builds carried it (under Temporal's 512 KB warning at about
// 450 bytes a shard), so a coordinator of that size can still be rolled
// back to such a build; a larger one, which those builds could not carry
// past some 4,700 shards anyway, travels folded.
const foldShardsAbove = 1000

// folded returns st with its table as continue-as-new carries it: whole
// rows in Shards up to foldShardsAbove shards, else folded into Groups
// and Notes; running says which shards' handoffs are still running
// (their notes come first).
func (st CoordinatorState) folded(running func(streaming.ShardID) bool) CoordinatorState {
	type key struct {
		owner  Owner
		status string
		round  uint64
		at     time.Time
	}
	rows := st.Table()
	st.Shards, st.Groups, st.Notes = nil, nil, nil
	if len(rows) <= foldShardsAbove {
		st.Shards = rows
		return st
	}
	index := map[key]int{}
	for _, r := range rows {
		k := key{r.Owner, r.Status, r.Round, r.At.UTC().Round(0)}
		i, ok := index[k]
		if !ok {
			i = len(st.Groups)
			index[k] = i
			st.Groups = append(st.Groups, ShardGroup{Owner: r.Owner, Status: r.Status, Round: r.Round, At: r.At})
		}
		g := &st.Groups[i]
		// Zeros for the shards before the first that has one.
		if r.CheckpointID != 0 && g.CheckpointIDs == nil {
			g.CheckpointIDs = make([]uint64, len(g.Shards))
		}
		if r.Local != 0 && g.Local == nil {
			g.Local = make([]int64, len(g.Shards))
		}
		g.Shards = append(g.Shards, r.Shard)
		if g.CheckpointIDs != nil {
			g.CheckpointIDs = append(g.CheckpointIDs, r.CheckpointID)
		}
		if g.Local != nil {
			g.Local = append(g.Local, r.Local)
		}
	}
	for _, first := range []bool{true, false} {
		for _, r := range rows {
			if len(st.Notes) == maxCarriedNotes {
				break
			}
			if (r.Error != "" || r.Handoff != "") && first == running(r.Shard) {
				st.Notes = append(st.Notes, ShardNote{Shard: r.Shard, Error: r.Error, Handoff: r.Handoff})
			}
		}
	}
	return st
}
