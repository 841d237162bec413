package streaming_test

import (
	"fmt"
	"iter"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
)

type reading struct {
	sensor string
	ts     int64
	value  float64
}

type level int

const (
	quiet level = iota
	loud
)

func readings(rs ...reading) iter.Seq[reading] { return slices.Values(rs) }

func TestFlowKeyedTypedSignals(t *testing.T) {
	g, err := streaming.NewBuilder().Input("value").Node("total", newSum, "value").Build()
	require.NoError(t, err)
	b := streaming.Binding[reading, level, float64]{
		Key: func(r reading) string { return r.sensor },
		Inputs: func(r reading, dst []streaming.Computed) int64 {
			dst[0] = streaming.Float(r.value)
			return r.ts
		},
		Signal: func(key string, ts int64, out *streaming.Instance) (streaming.Signal[level, float64], bool) {
			total := out.Output(0).Float64()
			if total < 5 {
				return streaming.Signal[level, float64]{}, false
			}
			return streaming.Signal[level, float64]{Key: key, TS: ts, Mode: loud, Payload: total}, true
		},
	}
	in := readings(
		reading{"a", 1, 3}, reading{"b", 2, 1}, reading{"a", 3, 3},
		reading{"b", 4, 1}, reading{"a", 5, -10}, reading{"b", 6, 4},
	)
	got := slices.Collect(streaming.Flow(in, g, b))
	want := []streaming.Signal[level, float64]{
		{Key: "a", TS: 3, Mode: loud, Payload: 6},
		{Key: "b", TS: 6, Mode: loud, Payload: 6},
	}
	assert.Equal(t, want, got, "state is per key: b's total must not include a's readings")
}

func TestFlowStopsPullingWhenConsumerStops(t *testing.T) {
	g, err := streaming.NewBuilder().Input("value").Node("total", newSum, "value").Build()
	require.NoError(t, err)
	pulled := 0
	src := func(yield func(reading) bool) {
		for i := range 1000 {
			pulled++
			if !yield(reading{"k", int64(i), 1}) {
				return
			}
		}
	}
	b := streaming.Binding[reading, level, float64]{
		Key:    func(r reading) string { return r.sensor },
		Inputs: func(r reading, dst []streaming.Computed) int64 { dst[0] = streaming.Float(r.value); return r.ts },
		Signal: func(k string, ts int64, o *streaming.Instance) (streaming.Signal[level, float64], bool) {
			return streaming.Signal[level, float64]{Key: k, TS: ts, Payload: o.Output(0).Float64()}, true
		},
	}
	n := 0
	for s := range streaming.Flow(src, g, b) {
		n++
		if s.Payload == 3 {
			break
		}
	}
	assert.Equal(t, 3, n)
	assert.Equal(t, 3, pulled, "Flow must pull lazily: one record per signal asked for")
}

func TestFlowFunc(t *testing.T) {
	var total float64
	out := slices.Collect(streaming.FlowFunc(readings(reading{"a", 1, 1}, reading{"a", 2, 2}, reading{"a", 3, 3}),
		func(r reading) (string, bool) {
			total += r.value
			return fmt.Sprintf("%s=%g", r.sensor, total), r.value != 2
		}))
	assert.Equal(t, []string{"a=1", "a=6"}, out)
}
