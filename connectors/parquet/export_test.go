package parquet

import (
	"bytes"
	"time"

	"github.com/tflo-io/tflo/streaming"
)

// ResealChecksum recomputes the whole-file checksum of data in place, as
// a tool that edits a file and fixes its checksum would: the hostile case
// the checksum cannot catch. It reports false when data has no checksum
// entry to seal.
func ResealChecksum(data []byte) bool {
	i := bytes.LastIndex(data, []byte(checksumPrefix))
	if i < 0 || i+len(checksumPrefix)+8 > len(data) {
		return false
	}
	copy(data[i+len(checksumPrefix):], checksumPlaceholder)
	return sealChecksum(data) == nil
}

// WithInlineRowGroups makes a RollingWriter write pre-commit records the
// way it did before row-group segments: every row group of the open file
// re-encoded into every record (the baseline of BenchmarkRollingPreCommit;
// also how records of older workers look to Restore).
func WithInlineRowGroups() WriterOption { return func(c *writerConfig) { c.inlineRowGroups = true } }

// HeldRows is how many rows shard's sink holds for its writer.
func (s *Sink) HeldRows(shard streaming.ShardID) int {
	sh, err := s.shard(shard)
	if err != nil {
		return 0
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return len(sh.held)
}

// SetCompactAbortTimeout sets how long Compact gives the abort of a
// failed run's upload, until the returned function restores it.
func SetCompactAbortTimeout(d time.Duration) (restore func()) {
	old := compactAbortTimeout
	compactAbortTimeout = d
	return func() { compactAbortTimeout = old }
}

// SetLocalArchiveClock sets the clock of a's sweep of stale temp files.
func SetLocalArchiveClock(a *LocalArchive, now func() time.Time) { a.now = now }

// SetTempSweepBudget sets how long LocalArchive.SweepTemps may take,
// until the returned function restores it.
func SetTempSweepBudget(d time.Duration) (restore func()) {
	old := tempSweepBudget
	tempSweepBudget = d
	return func() { tempSweepBudget = old }
}
