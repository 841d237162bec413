package worker

import (
	"bytes"
	"log/slog"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMemoryLimitFollowsTheStateBudget(t *testing.T) {
	assert.Equal(t, int64(256+128)<<20, memoryLimit(256<<20), "half the budget above it")
	assert.Equal(t, int64(72+128)<<20, memoryLimit(72<<20), "at least 128 MiB above it")
	assert.Equal(t, int64(3)<<30, memoryLimit(2<<30))

	before := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(before) })

	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	t.Setenv("GOMEMLIMIT", "")
	applyMemoryLimit(256<<20, log)
	assert.Equal(t, int64(384)<<20, debug.SetMemoryLimit(-1))
	assert.Contains(t, out.String(), "limit=384MiB")

	out.Reset()
	debug.SetMemoryLimit(before)
	t.Setenv("GOMEMLIMIT", "1GiB")
	applyMemoryLimit(256<<20, log)
	assert.Equal(t, before, debug.SetMemoryLimit(-1), "GOMEMLIMIT set: the limit is left alone")
	assert.Contains(t, out.String(), "GOMEMLIMIT=1GiB")
}
