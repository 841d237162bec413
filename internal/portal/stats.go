package portal

import (
	"time"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/workers/simulator"
)

// StackStats is a snapshot of the portal's progress.
type StackStats struct {
	Simulator simulator.Stats `json:"simulator"`
	// Edge: readings applied, signals published, malformed payloads sent
	// to the MQTT dead-letter topic, completed checkpoints.
	EdgeReadings    uint64 `json:"edge_readings"`
	EdgeSignals     uint64 `json:"edge_signals"`
	EdgeDLQ         uint64 `json:"edge_dlq"`
	EdgeCheckpoints uint64 `json:"edge_checkpoints"`
	// Central workers: CentralIn counts the signals they took (applied or
	// dead-lettered) by their offsets in the signals topic, so a signal a
	// shard's next owner replays from its last checkpoint (after a lost
	// partition or a failed worker) counts once. The others are summed
	// counters: derived outputs written (a replay writes its outputs
	// again, and counts them again), dead letters, completed shard
	// checkpoints, owned partitions.
	CentralIn          uint64 `json:"central_in"`
	CentralOut         uint64 `json:"central_out"`
	CentralDLQ         uint64 `json:"central_dlq"`
	CentralCheckpoints uint64 `json:"central_checkpoints"`
	Owned              []int  `json:"owned"`
	// Lag is the number of signals in Kafka the central workers have not
	// taken yet (EdgeSignals minus CentralIn).
	Lag int64 `json:"lag"`
	// EventLag is the wall clock minus the newest event time applied by
	// the central workers (their largest).
	EventLag time.Duration `json:"event_lag"`
}

// Stats returns the portal's progress.
func (s *Stack) Stats() StackStats {
	var st StackStats
	if s.Simulator != nil {
		st.Simulator = s.Simulator.Stats()
	}
	if s.Edge != nil {
		e := s.Edge.Stats()
		st.EdgeReadings, st.EdgeDLQ, st.EdgeCheckpoints = e.RecordsIn, e.DeadLettered, e.Checkpoints
		for _, sink := range s.Edge.Sinks() {
			if k, ok := sink.(interface{ Produced() uint64 }); ok {
				st.EdgeSignals += k.Produced() // the Kafka sink's acknowledged signals
			}
		}
	}
	st.CentralIn = s.centralTaken()
	for _, w := range s.Centrals {
		ws := w.Stats()
		st.CentralOut += ws.RecordsOut
		st.CentralDLQ += ws.DeadLettered
		st.Owned = append(st.Owned, ws.Owned)
		st.CentralCheckpoints += ws.Checkpoints
		if ws.LastEventTS > 0 {
			if l := time.Since(time.Unix(0, ws.LastEventTS)); l > st.EventLag {
				st.EventLag = l
			}
		}
	}
	st.Lag = int64(st.EdgeSignals) - int64(st.CentralIn)
	return st
}

// centralTaken is the number of signals the central workers took: per
// partition of the signals topic (which starts empty, so its offsets
// count from 0) the highest offset a holder applied, plus one. Remembered
// per partition, so it does not drop while a partition moves or its new
// owner replays what the old one took after its last checkpoint.
func (s *Stack) centralTaken() uint64 {
	s.takenMu.Lock()
	defer s.takenMu.Unlock()
	if s.taken == nil {
		s.taken = map[streaming.ShardID]int64{}
	}
	for _, w := range s.Centrals {
		for _, sh := range w.Shards() {
			if sh.Applied+1 > s.taken[sh.Shard] {
				s.taken[sh.Shard] = sh.Applied + 1
			}
		}
	}
	var n uint64
	for _, next := range s.taken {
		n += uint64(next)
	}
	return n
}
