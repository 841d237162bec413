package streaming_test

import (
	"math"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/tflo-io/tflo/streaming"
)

func TestComputedConversions(t *testing.T) {
	cases := []struct {
		name  string
		c     streaming.Computed
		kind  streaming.Kind
		f     float64
		i     int64
		truth bool
		mode  streaming.Mode
		str   string
	}{
		{"none", streaming.None(), streaming.KindNone, math.NaN(), 0, false, 0, "none"},
		{"float", streaming.Float(2.5), streaming.KindFloat, 2.5, 2, true, 0, "2.5"},
		{"negative float truncates toward zero", streaming.Float(-2.5), streaming.KindFloat, -2.5, -2, true, 0, "-2.5"},
		{"zero float is false", streaming.Float(0), streaming.KindFloat, 0, 0, false, 0, "0"},
		{"int", streaming.Int(-7), streaming.KindInt, -7, -7, true, 0, "-7"},
		{"bool true", streaming.Bool(true), streaming.KindBool, 1, 1, true, 0, "true"},
		{"bool false", streaming.Bool(false), streaming.KindBool, 0, 0, false, 0, "false"},
		{"signal", streaming.Sig(3, 1.25), streaming.KindSignal, 1.25, 1, true, 3, "sig(3,1.25)"},
		{"signal mode 0 is false", streaming.Sig(0, 9), streaming.KindSignal, 9, 9, false, 0, "sig(0,9)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.kind, tc.c.Kind())
			if math.IsNaN(tc.f) {
				assert.True(t, math.IsNaN(tc.c.Float64()))
			} else {
				assert.Equal(t, tc.f, tc.c.Float64())
			}
			assert.Equal(t, tc.i, tc.c.Int64())
			assert.Equal(t, tc.truth, tc.c.Truth())
			assert.Equal(t, tc.mode, tc.c.Mode())
			assert.Equal(t, tc.str, tc.c.String())
			assert.Equal(t, tc.kind == streaming.KindNone, tc.c.IsNone())
		})
	}
}

func TestComputedIsSmall(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(streaming.Computed{}), uintptr(16))
	var zero streaming.Computed
	assert.True(t, zero.IsNone(), "the zero value must be None")
}

func TestComputedKeepsNaNAndInf(t *testing.T) {
	assert.True(t, math.IsNaN(streaming.Float(math.NaN()).Float64()))
	assert.True(t, math.IsInf(streaming.Float(math.Inf(-1)).Float64(), -1))
}
