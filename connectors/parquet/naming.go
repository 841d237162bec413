package parquet

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/tflo-io/tflo/streaming"
)

// FileKey identifies one archive file: the pipeline and shard it belongs
// to, the owner epoch that wrote it, and the first and last source offsets
// it covers. The name is a pure function of the key, so replaying the same
// records under the same epoch rewrites the same file instead of adding one.
type FileKey struct {
	Pipeline string
	Shard    int32
	Epoch    streaming.Epoch
	First    int64 // source offset of the first row
	Last     int64 // source offset of the last row
}

// Name returns the file's archive name:
//
//	<pipeline>/shard-<shard, 6 digits>/<first, 20 digits>-<last, 20 digits>-e<epoch, 20 digits>.parquet
//
// Zero padding makes byte order equal to numeric order, so a listing
// sorted by name is in (shard, first offset, last offset, epoch) order.
func (k FileKey) Name() string {
	return fmt.Sprintf("%s/shard-%06d/%020d-%020d-e%020d.parquet", k.Pipeline, k.Shard, k.First, k.Last, uint64(k.Epoch))
}

// maxShard is the largest shard a name holds (6 digits).
const maxShard = 999999

// ShardPrefix returns the listing prefix of one shard of a pipeline.
func ShardPrefix(pipeline string, shard int32) string {
	return fmt.Sprintf("%s/shard-%06d/", pipeline, shard)
}

// Validate reports whether k can name a file.
func (k FileKey) Validate() error {
	if err := validatePipeline(k.Pipeline); err != nil {
		return err
	}
	switch {
	case k.Shard < 0:
		return fmt.Errorf("%w: shard %d is negative", ErrBadName, k.Shard)
	case k.Shard > maxShard:
		return fmt.Errorf("%w: shard %d has more than the name's 6 digits", ErrBadName, k.Shard)
	case k.First < 0:
		return fmt.Errorf("%w: first offset %d is negative", ErrBadName, k.First)
	case k.Last < k.First:
		return fmt.Errorf("%w: last offset %d is before first offset %d", ErrBadName, k.Last, k.First)
	}
	return nil
}

func validatePipeline(p string) error {
	if p == "" {
		return fmt.Errorf("%w: empty pipeline name", ErrBadName)
	}
	if p[0] == '_' {
		return fmt.Errorf("%w: pipeline name %q starts with '_' (reserved for the archive's working objects)", ErrBadName, p)
	}
	if p[0] == '.' {
		return fmt.Errorf("%w: pipeline name %q starts with '.' (readers hide such names)", ErrBadName, p)
	}
	for _, c := range p {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Errorf("%w: pipeline name %q has %q; use letters, digits, '-', '_' and '.'", ErrBadName, p, c)
		}
	}
	return nil
}

// ParseFileName reverses FileKey.Name. It returns an error wrapping
// ErrBadName for any other name.
func ParseFileName(name string) (FileKey, error) {
	bad := func(why string) (FileKey, error) {
		return FileKey{}, fmt.Errorf("%w: %q: %s", ErrBadName, name, why)
	}
	parts := strings.Split(name, "/")
	if len(parts) != 3 {
		return bad("want <pipeline>/shard-<n>/<first>-<last>-e<epoch>.parquet")
	}
	var k FileKey
	k.Pipeline = parts[0]
	shard, ok := parseShardFolder(parts[1])
	if !ok {
		return bad("folder is not shard-<6 digits>")
	}
	k.Shard = shard
	base, ok := strings.CutSuffix(parts[2], ".parquet")
	if !ok {
		return bad("no .parquet suffix")
	}
	f := strings.Split(base, "-")
	if len(f) != 3 || len(f[0]) != 20 || len(f[1]) != 20 || len(f[2]) != 21 || f[2][0] != 'e' {
		return bad("base name is not <20 digits>-<20 digits>-e<20 digits>")
	}
	first, err1 := strconv.ParseUint(f[0], 10, 63)
	last, err2 := strconv.ParseUint(f[1], 10, 63)
	epoch, err3 := strconv.ParseUint(f[2][1:], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return bad("offsets or epoch are not numbers")
	}
	k.First, k.Last, k.Epoch = int64(first), int64(last), streaming.Epoch(epoch)
	if err := k.Validate(); err != nil {
		return FileKey{}, fmt.Errorf("%q: %w", name, err)
	}
	if k.Name() != name {
		return bad("not in canonical form")
	}
	return k, nil
}

// StagingPrefix returns the hidden folder of one shard's working objects:
// the files a RollingWriter has not finished or published, and its
// pre-commit records. Readers never list it (see StagingDir).
func StagingPrefix(pipeline string, shard int32) string {
	return fmt.Sprintf("%s/staging/%s/shard-%06d/", StagingDir, pipeline, shard)
}

// inProgressName names the object a file is built in before it is
// published: hidden, and without the ".parquet" suffix, so no glob of
// archive files matches it.
func inProgressName(pipeline string, shard int32, first int64, epoch streaming.Epoch) string {
	return StagingPrefix(pipeline, shard) + fmt.Sprintf("%020d-e%020d.inprogress", first, uint64(epoch))
}

// segmentName names the row-group segment of the open file staging that
// holds its row groups from to to (segment ends, see openInfo.Segments).
func segmentName(staging string, from, to int) string {
	return fmt.Sprintf("%s.rg-%010d-%010d", staging, from, to)
}

// tailSegmentName names the tail segment of the open file staging that
// holds its bytes from to to (file offsets, see openInfo.TailSegments).
func tailSegmentName(staging string, from, to int64) string {
	return fmt.Sprintf("%s.tb-%020d-%020d", staging, from, to)
}

// isSegment reports whether name is one of the row-group or tail
// segments of the open file staging.
func isSegment(name, staging string) bool {
	return strings.HasPrefix(name, staging+".rg-") || strings.HasPrefix(name, staging+".tb-")
}

// recordName names the pre-commit record of a cut written at epoch.
func recordName(pipeline string, shard int32, cut int64, epoch streaming.Epoch) string {
	return StagingPrefix(pipeline, shard) + fmt.Sprintf("rec-%020d-e%020d", cut, uint64(epoch))
}

// parseRecordName returns the cut and epoch of a record name (the part
// after the staging prefix).
func parseRecordName(base string) (cut int64, epoch streaming.Epoch, ok bool) {
	rest, ok := strings.CutPrefix(base, "rec-")
	if !ok || len(rest) != 20+2+20 || rest[20:22] != "-e" {
		return 0, 0, false
	}
	c, err1 := strconv.ParseInt(rest[:20], 10, 64)
	e, err2 := strconv.ParseUint(rest[22:], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, false
	}
	return c, streaming.Epoch(e), true
}

// parseShardFolder reverses the shard-<6 digits> folder of ShardPrefix.
func parseShardFolder(folder string) (int32, bool) {
	digits, ok := strings.CutPrefix(folder, "shard-")
	if !ok || len(digits) != 6 {
		return 0, false
	}
	n, err := strconv.ParseUint(digits, 10, 31)
	return int32(n), err == nil
}

// stagedShard returns the pipeline and shard of a staging object's name
// relative to the staging folder (<pipeline>/shard-<n>/…; see
// StagingPrefix).
func stagedShard(rel string) (FileKey, bool) {
	parts := strings.SplitN(rel, "/", 3)
	if len(parts) != 3 || validatePipeline(parts[0]) != nil {
		return FileKey{}, false
	}
	shard, ok := parseShardFolder(parts[1])
	return FileKey{Pipeline: parts[0], Shard: shard}, ok
}
