package split

import (
	"errors"
	"fmt"

	"github.com/tflo-io/tflo/coordination"
)

// ErrFenced is returned by Tenancy.Commit when the tenancy is over: its
// CAS on the progress record lost (a newer owner or a release moved the
// record), or the worker already dropped it (self-fence, lost lease,
// forced revocation). Nothing was written. (A tenancy is released by its
// Handler returning, not by a method.)
var ErrFenced = errors.New("split: tenancy fenced")

// ErrWatermarkRegression is returned by Tenancy.Commit for a watermark below
// the one already committed.
var ErrWatermarkRegression = errors.New("split: watermark regression")

// ErrDuplicateWorker is wrapped (with coordination.ErrFatal) by the error
// Worker.Run returns when another live process runs with the same worker id.
var ErrDuplicateWorker = errors.New("split: another live worker has the same id")

// ErrLeasesExpired is wrapped by Worker.Err when no renewal of the worker's
// presence landed for a whole lease TTL: its leases have expired in the
// store (or are about to), and its tenancies have self-fenced.
var ErrLeasesExpired = errors.New("leases expired")

// ErrWorkerStopped is wrapped by Worker.Err once Run has returned after its
// context ended.
var ErrWorkerStopped = errors.New("worker stopped")

// ErrCorruptRecord is wrapped by errors for coordination records that fail
// to decode.
var ErrCorruptRecord = errors.New("split: corrupt coordination record")

func duplicateWorker(id WorkerID, theirs, ours string) error {
	return fmt.Errorf("%w: worker %q is held by instance %s (this is %s): %w",
		ErrDuplicateWorker, id, theirs, ours, coordination.ErrFatal)
}
