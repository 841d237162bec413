package fintech

import "github.com/tflo-io/tflo/streaming"

// Modes emitted by Bollinger: where the price stands against the bands.
const (
	InsideBands streaming.Mode = 0  // lower ≤ price ≤ upper
	AboveBand   streaming.Mode = 1  // price > upper band
	BelowBand   streaming.Mode = -1 // price < lower band
)

// Modes emitted by MACD: the sign of the histogram (line − signal).
const (
	Neutral streaming.Mode = 0  // line == signal, up to rounding (see MACD)
	Bullish streaming.Mode = 1  // line above its signal line
	Bearish streaming.Mode = -1 // line below its signal line
)

// Modes emitted by MACrossover.
const (
	GoldenCross streaming.Mode = 1  // the fast average crossed above the slow one
	DeathCross  streaming.Mode = -1 // the fast average crossed below the slow one
)
