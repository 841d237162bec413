package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.temporal.io/api/serviceerror"
)

// The server sees --timeout's deadline too and may reset a call a moment
// before the client's timer fires: that is still the timeout, not another
// failure (CI saw "RST_STREAM ... CANCEL" with wctx not yet done).
func TestExpiredCountsAServerResetAtTheDeadline(t *testing.T) {
	wf := &waitFlags{wait: true, timeout: 300 * time.Millisecond}
	ctx := context.Background()
	wctx, cancel := wf.context(ctx)
	defer cancel()
	reset := serviceerror.NewCanceled("stream terminated by RST_STREAM with error code: CANCEL")
	assert.True(t, wf.expired(ctx, wctx, reset), "a reset within a second of the deadline")
	assert.False(t, wf.expired(ctx, wctx, errors.New("permission denied")), "another error")

	far := &waitFlags{wait: true, timeout: time.Hour}
	fctx, fcancel := far.context(ctx)
	defer fcancel()
	assert.False(t, far.expired(ctx, fctx, reset), "a reset long before the deadline")

	none := &waitFlags{wait: true}
	nctx, ncancel := none.context(ctx)
	defer ncancel()
	assert.False(t, none.expired(ctx, nctx, reset), "no --timeout")

	parent, pcancel := context.WithCancel(ctx)
	pctx, c2 := wf.context(parent)
	defer c2()
	pcancel()
	assert.False(t, wf.expired(parent, pctx, reset), "the caller gave up (Ctrl-C), not --timeout")
}
