package central

import (
	"errors"
	"fmt"

	"github.com/tflo-io/tflo/streaming"
)

// ErrNotHeld is returned by the Host's handoff steps for a shard this
// worker does not hold at the requested epoch. It wraps
// streaming.ErrFenced, so package activities classifies it as the
// non-retryable NotOwner.
var ErrNotHeld = fmt.Errorf("shard not held by this worker: %w", streaming.ErrFenced)

// ErrClosed is returned by Run after Close, or when Run is called twice.
var ErrClosed = errors.New("central worker closed")
