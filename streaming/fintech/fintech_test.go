package fintech

import (
	"math"
	"slices"
	"testing"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/internal/optest"
)

// Hand-computed tables: warm-up, steady state and NaN/±Inf.
func TestOperatorsHandComputed(t *testing.T) {
	sig := streaming.Sig
	tests := []struct {
		name  string
		op    streaming.Operator
		ticks []tick
		want  []streaming.Computed
	}{
		{"vwap cumulative", NewVWAP(0),
			[]tick{{10, 1}, {12, 3}, {nan, 1}, {11, -1}, {20, 0}, {8, 4}, {9, pinf}},
			// 10·1/1; (10+36)/4; skip; skip (negative volume); (46+0)/4; (46+32)/8; skip
			[]streaming.Computed{f(10), f(11.5), none, none, f(11.5), f(9.75), none}},
		{"vwap over the last 2 trades", NewVWAP(2),
			[]tick{{10, 1}, {12, 3}, {20, 0}, {8, 4}, {5, 0}, {6, 0}},
			// 10; 46/4; (36+0)/3; (0+32)/4; (32+0)/4; no volume left → nothing
			[]streaming.Computed{f(10), f(11.5), f(12), f(8), f(8), none}},
		{"vwap zero volume first", NewVWAP(0), []tick{{10, 0}, {12, 2}}, []streaming.Computed{none, f(12)}},
		// Wilder, period 3: changes +1, −0.5, +1.5 → avgGain 5/6, avgLoss 1/6,
		// RS 5, RSI 100−100/6; next −1 → 5/9, 4/9, RS 1.25; NaN skipped;
		// +2 → 28/27, 8/27, RS 3.5.
		{"rsi/3 Wilder smoothing", NewRSI(3),
			prices(10, 11, 10.5, 12, 11, nan, 13),
			[]streaming.Computed{none, none, none, f(100 - 100.0/6), f(100 - 100/2.25), none, f(100 - 100/4.5)}},
		{"rsi flat market is 50", NewRSI(2), prices(5, 5, 5, 5), []streaming.Computed{none, none, f(50), f(50)}},
		{"rsi only gains is 100", NewRSI(2), prices(1, 2, 3, pinf, 4), []streaming.Computed{none, none, f(100), none, f(100)}},
		// k = 1, window 4: [1 2 3 4] mean 2.5, σ² 1.25; [2 3 4 10] mean 4.75,
		// σ² 9.6875; [3 4 10 0] mean 4.25, σ² 13.1875, lower 4.25−3.63 > 0.
		{"bollinger/4 upper band at K=1 with position", NewBollinger(4, 1, Upper),
			prices(1, 2, 3, nan, 4, 10, 0),
			[]streaming.Computed{none, none, none, none, sig(AboveBand, 2.5+math.Sqrt(1.25)),
				sig(AboveBand, 4.75+math.Sqrt(9.6875)), sig(BelowBand, 4.25+math.Sqrt(13.1875))}},
		{"bollinger/2 percent-b inside", NewBollinger(2, 2, PercentB),
			// [4 6]: mean 5, σ 1, bands 3..7 → (6−3)/4; [6 6]: bands coincide → 0.5
			prices(4, 6, 6), []streaming.Computed{none, sig(InsideBands, 0.75), sig(InsideBands, 0.5)}},
		// fast 2 (α 2/3), slow 3 (α 1/2), signal 2 over 1 2 3 5 4:
		// fast 1.5, 2.5, 25/6, 73/18; slow 2, 7/2, 15/4; line 1/2, 2/3, 11/36;
		// signal seeded (1/2+2/3)/2 = 7/12 at the 4th price, then 43/108.
		{"macd 2/3/2 histogram", NewMACD(2, 3, 2, MACDHistogram),
			prices(1, 2, 3, 5, nan, 4),
			[]streaming.Computed{none, none, none, sig(Bullish, 2.0/3-7.0/12), none, sig(Bearish, 11.0/36-43.0/108)}},
		{"macd 2/3/2 line", NewMACD(2, 3, 2, MACDLine),
			prices(1, 2, 3, 5, 4), []streaming.Computed{none, none, none, sig(Bullish, 2.0/3), sig(Bearish, 11.0/36)}},
		{"macd 2/3/2 signal", NewMACD(2, 3, 2, MACDSignal),
			prices(1, 2, 3, 5, 4), []streaming.Computed{none, none, none, sig(Bullish, 7.0/12), sig(Bearish, 43.0/108)}},
		// SMA(2) vs SMA(3): 3.5<4 (side set), 3.5<3.67, 5>4.33 golden,
		// 5.5>5, 4<4.67 death.
		{"ma crossover 2/3", NewMACrossover(2, 3),
			prices(5, 4, 3, 4, nan, 6, 5, 3),
			[]streaming.Computed{none, none, none, none, none, sig(GoldenCross, 5), none, sig(DeathCross, 4)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			optest.RequireOutputs(t, tt.want, feed(tt.op, tt.ticks))
		})
	}
}

// emaSeries is the EMA of xs with period n as charting packages and
// Appel define it: α = 2/(n+1), seeded with the simple mean of the first
// n values; NaN before that.
func emaSeries(xs []float64, n int) []float64 {
	out := make([]float64, len(xs))
	a := 2 / float64(n+1)
	var e float64
	for i, x := range xs {
		switch {
		case i < n-1:
			out[i] = math.NaN()
			continue
		case i == n-1:
			for _, v := range xs[:n] {
				e += v
			}
			e /= float64(n)
		default:
			e = a*x + (1-a)*e
		}
		out[i] = e
	}
	return out
}

// Reference formulas recomputed from scratch over every valid tick so far,
// on a long noisy market stream.
func TestOperatorsAgainstReference(t *testing.T) {
	ticks := market(1, 1500)
	tests := []struct {
		name string
		op   streaming.Operator
		ok   func(tick) bool                      // whether the operator accepts the tick
		ref  func(hist []tick) streaming.Computed // accepted ticks so far, newest last
	}{
		{"vwap/20 = Σp·v/Σv over the last 20 trades", NewVWAP(20),
			func(t tick) bool { return valid(t.p) && valid(t.v) && t.v >= 0 },
			func(h []tick) streaming.Computed {
				var num, den float64
				for _, t := range h[max(0, len(h)-20):] {
					num += t.p * t.v
					den += t.v
				}
				if den == 0 {
					return none
				}
				return f(num / den)
			}},
		{"vwap cumulative", NewVWAP(0),
			func(t tick) bool { return valid(t.p) && valid(t.v) && t.v >= 0 },
			func(h []tick) streaming.Computed {
				var num, den float64
				for _, t := range h {
					num += t.p * t.v
					den += t.v
				}
				if den == 0 {
					return none
				}
				return f(num / den)
			}},
		// Wilder 1978: first averages are simple means of the first 14
		// gains/losses, then (prev·13 + current)/14; RSI = 100 − 100/(1+RS).
		{"rsi/14 Wilder 1978", NewRSI(14), func(t tick) bool { return valid(t.p) },
			func(h []tick) streaming.Computed {
				const n = 14
				if len(h) < n+1 {
					return none
				}
				var ag, al float64
				for i := 1; i < len(h); i++ {
					ch := h[i].p - h[i-1].p
					g, l := math.Max(ch, 0), math.Max(-ch, 0)
					if i <= n {
						ag += g / n
						al += l / n
					} else {
						ag = (ag*(n-1) + g) / n
						al = (al*(n-1) + l) / n
					}
				}
				if al == 0 {
					if ag == 0 {
						return f(50)
					}
					return f(100)
				}
				return f(100 - 100/(1+ag/al))
			}},
		// Bollinger: middle = SMA(20), bands = middle ± 2σ, σ the population
		// standard deviation of the same 20 prices.
		{"bollinger/20/2 lower", NewBollinger(20, 2, Lower), func(t tick) bool { return valid(t.p) },
			bollingerRef(20, 2, Lower)},
		{"bollinger/20/2 middle", NewBollinger(20, 2, Middle), func(t tick) bool { return valid(t.p) },
			bollingerRef(20, 2, Middle)},
		{"bollinger/10/1.5 percent-b", NewBollinger(10, 1.5, PercentB), func(t tick) bool { return valid(t.p) },
			bollingerRef(10, 1.5, PercentB)},
		// Appel: MACD = EMA12 − EMA26, signal = EMA9 of MACD, histogram =
		// MACD − signal.
		{"macd 12/26/9 histogram (Appel)", NewMACD(12, 26, 9, MACDHistogram), func(t tick) bool { return valid(t.p) },
			macdRef(MACDHistogram)},
		{"macd 12/26/9 signal (Appel)", NewMACD(12, 26, 9, MACDSignal), func(t tick) bool { return valid(t.p) },
			macdRef(MACDSignal)},
		{"ma crossover 5/20", NewMACrossover(5, 20), func(t tick) bool { return valid(t.p) }, crossoverRef(5, 20, false)},
		// Warm-up policies other than the default.
		{"vwap/20 full: nothing before 20 trades", NewVWAP(20).WithWarmup(streaming.WarmupFull),
			func(t tick) bool { return valid(t.p) && valid(t.v) && t.v >= 0 },
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
		{"rsi/14 partial: Σgain/(Σgain+Σloss) until 14 changes", NewRSI(14).WithWarmup(partial),
			func(t tick) bool { return valid(t.p) },
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
		{"bollinger/20/2 upper partial: bands of the prices so far", NewBollinger(20, 2, Upper).WithWarmup(partial),
			func(t tick) bool { return valid(t.p) },
			func(h []tick) streaming.Computed {
				return bollingerRef(min(len(h), 20), 2, Upper)(h)
			}},
		{"macd 12/26/9 histogram partial", NewMACD(12, 26, 9, MACDHistogram).WithWarmup(partial),
			func(t tick) bool { return valid(t.p) },
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
		{"ma crossover 5/20 partial: averages of the prices so far", NewMACrossover(5, 20).WithWarmup(partial),
			func(t tick) bool { return valid(t.p) }, crossoverRef(5, 20, true)},
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

// crossoverRef reports the crossing of the simple moving averages of the
// last fast and slow prices at the newest tick: the side is the sign of
// fast − slow, set by the first tick where they differ (from the first
// tick with partial warm-up, averaging the prices so far, else from the
// slow-th), and a crossing is a change of side.
func crossoverRef(fastN, slowN int, partial bool) func([]tick) streaming.Computed {
	return func(h []tick) streaming.Computed {
		sma := func(end, n int) float64 {
			n = min(n, end)
			s := 0.0
			for _, t := range h[end-n : end] {
				s += t.p
			}
			return s / float64(n)
		}
		first := slowN
		if partial {
			first = 1
		}
		side := 0
		out := none
		for end := first; end <= len(h); end++ {
			fast, slow := sma(end, fastN), sma(end, slowN)
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
	}
}

func feed1(op streaming.Operator, tk tick, ts int64) streaming.Computed {
	lo, _ := op.(streaming.Arity).Arity()
	in := []streaming.Computed{f(tk.p), f(tk.v)}
	return op.Eval(in[:lo], ts)
}

func bollingerRef(n int, k float64, band Band) func([]tick) streaming.Computed {
	return func(h []tick) streaming.Computed {
		if len(h) < n {
			return none
		}
		w := h[len(h)-n:]
		var mean float64
		for _, t := range w {
			mean += t.p
		}
		mean /= float64(n)
		var v float64
		for _, t := range w {
			v += (t.p - mean) * (t.p - mean)
		}
		sd := math.Sqrt(v / float64(n))
		up, lo, x := mean+k*sd, mean-k*sd, h[len(h)-1].p
		pos := InsideBands
		if x > up+1e-9 {
			pos = AboveBand
		} else if x < lo-1e-9 {
			pos = BelowBand
		}
		switch band {
		case Upper:
			return streaming.Sig(pos, up)
		case Lower:
			return streaming.Sig(pos, lo)
		case PercentB:
			if up-lo < 1e-12 {
				return streaming.Sig(pos, 0.5)
			}
			return streaming.Sig(pos, (x-lo)/(up-lo))
		}
		return streaming.Sig(pos, mean)
	}
}

func macdRef(comp MACDComponent) func([]tick) streaming.Computed {
	return func(h []tick) streaming.Computed {
		ps := make([]float64, len(h))
		for i, t := range h {
			ps[i] = t.p
		}
		if len(ps) < 26+9-1 {
			return none
		}
		fast, slow := emaSeries(ps, 12), emaSeries(ps, 26)
		line := make([]float64, 0, len(ps))
		for i := 25; i < len(ps); i++ {
			line = append(line, fast[i]-slow[i])
		}
		signal := emaSeries(line, 9)
		l, s := line[len(line)-1], signal[len(signal)-1]
		mode := Neutral
		if l-s > 1e-12 {
			mode = Bullish
		} else if l-s < -1e-12 {
			mode = Bearish
		}
		switch comp {
		case MACDSignal:
			return streaming.Sig(mode, s)
		case MACDHistogram:
			return streaming.Sig(mode, l-s)
		}
		return streaming.Sig(mode, l)
	}
}

func TestConstructorsPanicOnImpossibleParameters(t *testing.T) {
	tests := []struct {
		name string
		make func()
	}{
		{"vwap negative window", func() { NewVWAP(-1) }},
		{"rsi period 0", func() { NewRSI(0) }},
		{"bollinger window 0", func() { NewBollinger(0, 2, Middle) }},
		{"bollinger negative K", func() { NewBollinger(20, -1, Middle) }},
		{"bollinger unknown band", func() { NewBollinger(20, 2, Band(9)) }},
		{"macd fast == slow", func() { NewMACD(26, 26, 9, MACDLine) }},
		{"macd signal 0", func() { NewMACD(12, 26, 0, MACDLine) }},
		{"macd unknown component", func() { NewMACD(12, 26, 9, MACDComponent(7)) }},
		{"crossover fast > slow", func() { NewMACrossover(50, 20) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Fatal("constructor did not panic")
				}
			}()
			tt.make()
		})
	}
}

func TestModeNamesAreDistinct(t *testing.T) {
	if !slices.Equal([]string{Middle.String(), Upper.String(), Lower.String(), PercentB.String()},
		[]string{"middle", "upper", "lower", "percent_b"}) {
		t.Fatal("Band names")
	}
	if MACDLine.String() != "line" || MACDSignal.String() != "signal" || MACDHistogram.String() != "histogram" {
		t.Fatal("MACDComponent names")
	}
}
