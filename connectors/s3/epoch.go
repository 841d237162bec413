package s3

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/tflo-io/tflo/streaming"
)

// epochDir holds the epoch claims (ClaimEpoch): one object per name
// (keyName), holding the last epoch claimed under it in decimal.
const epochDir = "epochs/"

var _ streaming.EpochClaimer = (*Store)(nil)

// ClaimEpoch claims under name the lowest epoch, at least atLeast, past
// every epoch claimed under name before (streaming.EpochClaimer): it
// reads the name's object (the last epoch claimed) and writes the next
// one with a conditional PUT on the ETag read (If-None-Match "*" when
// there is none), so that of two runs claiming at once one writes and
// the other, refused, reads again and claims the one after. Without
// conditional writes (WithConditionalWrites) a second claim cannot be
// refused: the error wraps errors.ErrUnsupported.
func (s *Store) ClaimEpoch(ctx context.Context, name string, atLeast streaming.Epoch) (streaming.Epoch, error) {
	obj := keyName(epochDir, []byte(name))
	if !s.cfg.conditional {
		return 0, fmt.Errorf("s3 state store %s: claim an epoch of %q: needs conditional writes: %w", s.obj.uri(obj), name, errors.ErrUnsupported)
	}
	for attempt := 0; ; attempt++ {
		next, ifMatch, ifNoneMatch := atLeast, "", "*"
		body, etag, err := s.obj.get(ctx, obj, 32)
		switch {
		case isNotFound(err):
		case err != nil:
			return 0, fmt.Errorf("s3 state store: claim an epoch of %q: %w", name, err)
		default:
			last, perr := strconv.ParseUint(string(body), 10, 64)
			if perr != nil {
				return 0, fmt.Errorf("s3 state store %s: claim an epoch of %q: the last claim %q is not an epoch: %w", s.obj.uri(obj), name, body, streaming.ErrCorrupt)
			}
			if last == math.MaxUint64 {
				// last+1 would wrap to 0 and claim an epoch older than the
				// last one, which its owner's commits would then fence.
				return 0, fmt.Errorf("s3 state store %s: claim an epoch of %q: the last claim is the largest epoch, %d; no epoch is past it", s.obj.uri(obj), name, last)
			}
			next, ifMatch, ifNoneMatch = max(next, streaming.Epoch(last)+1), etag, ""
		}
		if _, err := s.obj.put(ctx, obj, strconv.AppendUint(nil, uint64(next), 10), ifMatch, ifNoneMatch); err != nil {
			if isPreconditionFailed(err) && attempt < 100 {
				continue // another run claimed since the read: the one after
			}
			return 0, fmt.Errorf("s3 state store: claim epoch %d of %q: %w", uint64(next), name, err)
		}
		return next, nil
	}
}
