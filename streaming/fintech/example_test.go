package fintech_test

import (
	"fmt"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/fintech"
)

// A per-symbol indicator graph: VWAP from price and volume, and a
// Bollinger node per band, each emitting where the price stands.
func Example() {
	g, err := streaming.NewBuilder().
		Input("price", "volume").
		Node("vwap", func() streaming.Operator { return fintech.NewVWAP(0) }, "price", "volume").
		Node("upper", func() streaming.Operator { return fintech.NewBollinger(4, 1, fintech.Upper) }, "price").
		Node("lower", func() streaming.Operator { return fintech.NewBollinger(4, 1, fintech.Lower) }, "price").
		Build()
	if err != nil {
		panic(err)
	}
	keyed := streaming.NewKeyed[string](g)
	trades := []struct {
		sym    string
		price  float64
		volume float64
	}{
		{"ACME", 10, 100}, {"ACME", 11, 300}, {"ACME", 10, 200}, {"ACME", 11, 100}, {"ACME", 14, 500},
	}
	for i, t := range trades {
		in := keyed.Eval(t.sym, int64(i), streaming.Float(t.price), streaming.Float(t.volume))
		vwap, _ := in.Value("vwap")
		upper, _ := in.Value("upper")
		lower, _ := in.Value("lower")
		if upper.IsNone() {
			fmt.Printf("%s %.0f: vwap %.3f, bands warming up\n", t.sym, t.price, vwap.Float64())
			continue
		}
		where := map[streaming.Mode]string{fintech.AboveBand: "above", fintech.InsideBands: "inside", fintech.BelowBand: "below"}[upper.Mode()]
		fmt.Printf("%s %.0f: vwap %.3f, bands %.3f..%.3f, price %s\n", t.sym, t.price, vwap.Float64(), lower.Float64(), upper.Float64(), where)
	}
	// Output:
	// ACME 10: vwap 10.000, bands warming up
	// ACME 11: vwap 10.750, bands warming up
	// ACME 10: vwap 10.500, bands warming up
	// ACME 11: vwap 10.571, bands 10.000..11.000, price inside
	// ACME 14: vwap 12.000, bands 10.000..13.000, price above
}

// MACD as three nodes, one per component; each carries the trend mode.
func ExampleNewMACD() {
	g, err := streaming.NewBuilder().
		Input("price").
		Node("line", func() streaming.Operator { return fintech.NewMACD(2, 3, 2, fintech.MACDLine) }, "price").
		Node("signal", func() streaming.Operator { return fintech.NewMACD(2, 3, 2, fintech.MACDSignal) }, "price").
		Node("hist", func() streaming.Operator { return fintech.NewMACD(2, 3, 2, fintech.MACDHistogram) }, "price").
		Build()
	if err != nil {
		panic(err)
	}
	in := g.NewInstance()
	for i, p := range []float64{1, 2, 3, 5, 4} {
		in.Eval(int64(i), streaming.Float(p))
		if in.Output(0).IsNone() {
			continue
		}
		trend := "bullish"
		if in.Output(2).Mode() == fintech.Bearish {
			trend = "bearish"
		}
		fmt.Printf("price %.0f: line %.4f signal %.4f histogram %+.4f %s\n",
			p, in.Output(0).Float64(), in.Output(1).Float64(), in.Output(2).Float64(), trend)
	}
	// Output:
	// price 5: line 0.6667 signal 0.5833 histogram +0.0833 bullish
	// price 4: line 0.3056 signal 0.3981 histogram -0.0926 bearish
}
