package ops

import (
	"fmt"
	"math"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/internal/opstate"
)

// EMA is the exponential moving average with period N: smoothing factor
// α = 2/(N+1) and, once seeded, ema ← ema + α·(x − ema).
//
// Warm-up: the average is seeded with the simple mean of the first N
// values (the usual charting convention, and the one MACD uses), so by
// default ([streaming.WarmupFull]) there is no output for the first N−1
// values; the N-th value emits the seed and every later valid value emits
// the updated average. With [EMA.WithWarmup](streaming.WarmupPartial) the
// first N−1 values emit the mean of the values seen so far (the seed in
// progress); the average itself is the same in both policies, and a blob
// loads into a node of either.
//
// NaN and ±Inf inputs, and inputs beyond ±MaxFloat64/(2N) (which could
// overflow the warm-up sum), are refused: the state is unchanged and Eval
// returns streaming.Rejected() for that record.
//
// The warm-up sum is compensated and the seed is its corrected mean
// ([opstate.KSum.Mean]), so a constant input seeds (and keeps) exactly
// that constant: a plain sum made 0.1 three times average
// 0.10000000000000002.
//
// State (TypeVersion 2): period | values seen during warm-up | their
// compensated sum (sum, compensation) | current average. TypeVersion 1
// blobs (a plain sum) are migrated; see [EMA.Migrate].
type EMA struct {
	streaming.Base
	n     int
	alpha float64
	lim   float64 // input bound: opstate.InputBound(N)
	seen  int     // values seen, capped at n
	seed  ksum
	value float64
	// partial: emit the seed in progress during warm-up.
	partial bool
}

var (
	_ streaming.Operator = (*EMA)(nil)
	_ streaming.Arity    = (*EMA)(nil)
	_ streaming.Migrator = (*EMA)(nil)
)

const emaMaxPeriod = 1 << 24

// NewEMA returns an EMA with period n. It panics if n < 1 or n > 2^24.
func NewEMA(n int) *EMA {
	if n < 1 || n > emaMaxPeriod {
		panic(fmt.Sprintf("ops.NewEMA: period %d is outside 1..%d", n, emaMaxPeriod))
	}
	return &EMA{n: n, alpha: 2 / float64(n+1), lim: opstate.InputBound(n)}
}

// WithWarmup sets the warm-up policy (default streaming.WarmupFull) and
// returns e. Call it before the first Eval, in the node's factory.
func (e *EMA) WithWarmup(w streaming.Warmup) *EMA {
	e.partial = w == streaming.WarmupPartial
	return e
}

// Name returns "ema".
func (*EMA) Name() string { return "ema" }

// TypeVersion returns 2.
func (*EMA) TypeVersion() uint32 { return 2 }

// Arity is exactly one input.
func (*EMA) Arity() (int, int) { return 1, 1 }

// Period returns N.
func (e *EMA) Period() int { return e.n }

// Reset forgets every value.
func (e *EMA) Reset() { e.seen, e.seed, e.value = 0, ksum{}, 0 }

// Eval folds in[0] into the average and emits it once seeded.
func (e *EMA) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
	x := in[0].Float64()
	if !(math.Abs(x) <= e.lim) {
		return streaming.Rejected()
	}
	if e.seen < e.n {
		seed := e.seed
		seed.Add(x)
		if !seed.Finite() { // only after loading a blob saved before the bound existed
			return streaming.Rejected()
		}
		e.seen++
		e.seed = seed
		if e.seen < e.n {
			if e.partial {
				return streaming.Float(e.seed.Mean(e.seen))
			}
			return streaming.NoOutput()
		}
		e.value = e.seed.Mean(e.n)
		return streaming.Float(e.value)
	}
	v := e.value + e.alpha*(x-e.value)
	if !finiteIn(v) {
		return streaming.Rejected()
	}
	e.value = v
	return streaming.Float(e.value)
}

// Save writes: period | seen | seed sum | seed compensation | value.
func (e *EMA) Save() ([]byte, error) {
	dst := make([]byte, 0, 32)
	dst = putU(dst, uint64(e.n))
	dst = putU(dst, uint64(e.seen))
	dst = putF(dst, e.seed.Sum)
	dst = putF(dst, e.seed.Comp)
	dst = putF(dst, e.value)
	return dst, nil
}

// Load reads a blob made by Save; it refuses one saved with another period.
func (e *EMA) Load(data []byte) error {
	d := opstate.NewDecoder(data)
	n := d.Count("period", emaMaxPeriod)
	if d.Err == nil && n != e.n {
		return mismatch(e.Name(), "period", n, e.n)
	}
	seen := d.Count("values seen", uint64(e.n))
	seed := ksum{Sum: d.Finite("seed sum"), Comp: d.Finite("seed compensation")}
	value := d.Finite("average")
	if err := d.Done(e.Name()); err != nil {
		return err
	}
	e.seen, e.seed, e.value = seen, seed, value
	return nil
}

// MigratesFrom returns [1].
func (*EMA) MigratesFrom() []uint32 { return []uint32{1} }

// Migrate converts a TypeVersion 1 blob (period | seen | plain seed sum |
// value) to TypeVersion 2 by inserting a zero compensation after the sum.
func (e *EMA) Migrate(from uint32, data []byte) ([]byte, error) {
	if from != 1 {
		return nil, fmt.Errorf("ema: no migration from type version %d", from)
	}
	d := opstate.NewDecoder(data)
	d.Count("period", emaMaxPeriod)
	d.Count("values seen", emaMaxPeriod)
	d.Finite("seed sum")
	if d.Err != nil {
		return nil, d.Done(e.Name())
	}
	out := make([]byte, 0, len(data)+8)
	out = append(out, data[:d.Off]...)
	out = putF(out, 0)
	return append(out, data[d.Off:]...), nil
}
