package fintech

import (
	"encoding/hex"
	"errors"
	"math"
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

// Warm-up policies against from-scratch reference formulas over the ticks
// accepted so far, on a long noisy market stream.
func TestWarmupAgainstReference(t *testing.T) {
	ticks := market(2, 1500)
	price := func(t tick) bool { return valid(t.p) }
	trade := func(t tick) bool { return valid(t.p) && valid(t.v) && t.v >= 0 }
	tests := []struct {
		name string
		op   streaming.Operator
		ok   func(tick) bool
		ref  func(hist []tick) streaming.Computed
	}{
		{"vwap/20 full: nothing before 20 trades", NewVWAP(20).WithWarmup(streaming.WarmupFull), trade,
			func(h []tick) streaming.Computed {
				if len(h) < 20 {
					return none
				}
				var num, den float64
				for _, t := range h[len(h)-20:] {
					num += t.p * t.v
					den += t.v
				}
				if den == 0 {
					return none
				}
				return f(num / den)
			}},
		{"rsi/14 partial: Σgain/(Σgain+Σloss) until 14 changes", NewRSI(14).WithWarmup(partial), price,
			func(h []tick) streaming.Computed {
				const n = 14
				if len(h) < 2 {
					return none
				}
				var sg, sl, ag, al float64
				for i := 1; i < len(h); i++ {
					ch := h[i].p - h[i-1].p
					g, l := math.Max(ch, 0), math.Max(-ch, 0)
					switch {
					case i < n:
						sg, sl = sg+g, sl+l
						ag, al = sg/float64(i), sl/float64(i)
					case i == n:
						sg, sl = sg+g, sl+l
						ag, al = sg/n, sl/n
					default:
						ag = (ag*(n-1) + g) / n
						al = (al*(n-1) + l) / n
					}
				}
				if ag+al == 0 {
					return f(50)
				}
				return f(100 * ag / (ag + al))
			}},
		{"bollinger/20/2 upper partial: bands of the prices so far", NewBollinger(20, 2, Upper).WithWarmup(partial), price,
			func(h []tick) streaming.Computed {
				return bollingerRef(min(len(h), 20), 2, Upper)(h)
			}},
		{"macd 12/26/9 histogram partial", NewMACD(12, 26, 9, MACDHistogram).WithWarmup(partial), price,
			func(h []tick) streaming.Computed {
				ps := make([]float64, len(h))
				for i, t := range h {
					ps[i] = t.p
				}
				fast, slow := emaPartialSeries(ps, 12), emaPartialSeries(ps, 26)
				line := make([]float64, len(ps))
				for i := range ps {
					line[i] = fast[i] - slow[i]
				}
				l := line[len(line)-1]
				s := emaPartialSeries(line, 9)[len(line)-1]
				mode := Neutral
				if l-s > 1e-12 {
					mode = Bullish
				} else if l-s < -1e-12 {
					mode = Bearish
				}
				return streaming.Sig(mode, l-s)
			}},
		{"ma crossover 5/20 partial: averages of the prices so far", NewMACrossover(5, 20).WithWarmup(partial), price,
			func(h []tick) streaming.Computed {
				sma := func(end, n int) float64 {
					n = min(n, end)
					s := 0.0
					for _, t := range h[end-n : end] {
						s += t.p
					}
					return s / float64(n)
				}
				side := 0
				var out streaming.Computed
				for end := 1; end <= len(h); end++ {
					fast, slow := sma(end, 5), sma(end, 20)
					out = none
					d := 0
					if fast > slow+1e-9 {
						d = 1
					} else if fast < slow-1e-9 {
						d = -1
					}
					if d != 0 && side != 0 && d != side {
						out = streaming.Sig(streaming.Mode(d), fast)
					}
					if d != 0 {
						side = d
					}
				}
				return out
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var hist []tick
			outs := 0
			for i, tk := range ticks {
				got := feed1(tt.op, tk, int64(i))
				want := none
				if tt.ok(tk) {
					hist = append(hist, tk)
					want = tt.ref(hist)
				}
				if !optest.ApproxEqual(got, want) {
					t.Fatalf("tick %d %+v: got %v, want %v", i, tk, got, want)
				}
				if !got.IsNone() {
					outs++
				}
			}
			if outs < 5 {
				t.Fatalf("only %d outputs: the stream does not exercise the operator", outs)
			}
		})
	}
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
