package fintech

import (
	"encoding/hex"
	"errors"
	"testing"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/internal/optest"
)

const partial = streaming.WarmupPartial

// emaPartialSeries is emaSeries with the warm-up filled by the mean of the
// values so far (which the seed is at the N-th value).
func emaPartialSeries(xs []float64, n int) []float64 {
	out := emaSeries(xs, n)
	s := 0.0
	for i := 0; i < min(n-1, len(xs)); i++ {
		s += xs[i]
		out[i] = s / float64(i+1)
	}
	return out
}

func TestPartialWarmupHandComputed(t *testing.T) {
	sig := streaming.Sig
	tests := []struct {
		name  string
		op    streaming.Operator
		ticks []tick
		want  []streaming.Computed
	}{
		// [4]: σ 0, bands coincide → 0.5; [4 6]: mean 5, σ 1 → (6−3)/4
		{"bollinger/3 percent-b partial", NewBollinger(3, 2, PercentB).WithWarmup(partial),
			prices(4, 6), []streaming.Computed{sig(InsideBands, 0.5), sig(InsideBands, 0.75)}},
		// +1 → 100; −0.5 → 1/1.5; flat market stays 50
		{"rsi/3 partial", NewRSI(3).WithWarmup(partial),
			prices(10, 11, 10.5), []streaming.Computed{none, f(100), f(100 * 1 / 1.5)}},
		{"rsi/2 partial flat", NewRSI(2).WithWarmup(partial), prices(5, 5), []streaming.Computed{none, f(50)}},
		{"vwap/2 full", NewVWAP(2).WithWarmup(streaming.WarmupFull),
			[]tick{{10, 1}, {12, 3}, {20, 1}}, []streaming.Computed{none, f(11.5), f(14)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { optest.RequireOutputs(t, tt.want, feed(tt.op, tt.ticks)) })
	}
}

// MACD saves its warm-up policy (it changes what the signal EMA has
// seen): a blob loads only into a node of the same policy.
func TestMACDWarmupIsState(t *testing.T) {
	a := NewMACD(3, 5, 2, MACDLine).WithWarmup(partial)
	feed(a, prices(1, 2, 3))
	blob, err := a.Save()
	if err != nil {
		t.Fatal(err)
	}
	err = NewMACD(3, 5, 2, MACDLine).Load(blob)
	var le *streaming.OperatorLoadError
	if !errors.As(err, &le) || errors.Is(err, streaming.ErrCorrupt) {
		t.Fatalf("full node loading a partial blob: got %v, want a configuration mismatch", err)
	}
}

// A TypeVersion 1 MACD blob (before the warm-up policy existed), saved by
// the old code as NewMACD(3, 5, 2, MACDHistogram) after prices 10 11 12.5
// 12 13 14.25, migrates to version 2 and continues like an uninterrupted
// run.
func TestMACDMigratesVersion1(t *testing.T) {
	v1, _ := hex.DecodeString("03050202030000000000c04040aaaaaaaaaa8a2a40050000000000404d40999999999919294002000000000000f53f000000000000e53f")
	ps := prices(10, 11, 12.5, 12, 13, 14.25, 13.5, 15, 14)
	want := feed(NewMACD(3, 5, 2, MACDHistogram), ps)
	m := NewMACD(3, 5, 2, MACDHistogram)
	v2, err := m.Migrate(1, v1)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Load(v2); err != nil {
		t.Fatal(err)
	}
	optest.RequireOutputs(t, want[6:], feed(m, ps[6:]))
	if _, err := m.Migrate(1, v1[:2]); err == nil {
		t.Fatal("a truncated version 1 blob migrated")
	}
}
