package kafka

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

// The signal envelope built from a record's outputs is byte for byte the
// one a typed signal encodes to, so consumers of the envelope cannot
// tell a pipeline's signals from hand-built ones.
func TestSignalEnvelopesMatchTypedSignals(t *testing.T) {
	type payload struct {
		Smoothed float64 `json:"smoothed"`
		Raw      float64 `json:"raw"`
		Topic    string  `json:"topic"`
	}
	rec := func(off int64, alarm bool) []streaming.Output {
		base := streaming.Output{Shard: "edge-1", Offset: off, Topic: "sensors/s-1", Key: "s-1", TS: 1_767_323_047_000 * 1e6}
		var outs []streaming.Output
		if alarm {
			o := base
			o.Name, o.Value, o.Mode = "alarm", 1, 1
			outs = append(outs, o)
		}
		sm, raw := base, base
		sm.Name, sm.Value = "smooth", 31.688799999999997
		raw.Name, raw.Value = "value", 34.666
		return append(outs, sm, raw)
	}
	enc := SignalEnvelopes{Trigger: "alarm", Modes: map[streaming.Mode]string{1: "raised", -1: "cleared"}, Scale: 1e6,
		Payload: []PayloadField{{"smoothed", "smooth"}, {"raw", "value"}, {"topic", "$topic"}}}
	outs := append(rec(1, false), rec(2, true)...)
	outs = append(outs, rec(3, false)...)
	recs, err := enc.AppendRecords(nil, outs)
	require.NoError(t, err)
	require.Len(t, recs, 1, "one envelope per record whose trigger emitted")
	want, err := EncodeSignal(streaming.Signal[string, payload]{Key: "s-1", TS: 1_767_323_047_000, Mode: "raised",
		Payload: payload{Smoothed: 31.688799999999997, Raw: 34.666, Topic: "sensors/s-1"}}, nil, 0)
	require.NoError(t, err)
	require.Equal(t, string(want), string(recs[0].Value))
	require.Equal(t, "s-1", string(recs[0].Key))

	j, err := JSONOutputs{Scale: 1e6, Modes: func(o string, _ streaming.Mode) (string, bool) { return "raised", o == "alarm" }}.AppendRecords(nil, rec(2, true)[:2])
	require.NoError(t, err)
	require.Equal(t, `{"key":"s-1","name":"alarm","ts":1767323047000,"value":1,"mode":"raised"}`, string(j[0].Value))
	require.Equal(t, `{"key":"s-1","name":"smooth","ts":1767323047000,"value":31.688799999999997}`, string(j[1].Value))
}

// A signal's mode 0 is a mode like any other (a hysteresis' low, a
// Bollinger band's inside): JSONOutputs writes its name when Modes names
// it, as the Influx sink tags it. It was left out, so a consumer could not
// tell a signal that fell back to low from a plain value; an output whose
// modes are not named (a plain value) still carries none.
func TestJSONOutputsWriteANamedModeZero(t *testing.T) {
	modes := func(output string, m streaming.Mode) (string, bool) { // as a pipeline's: only the signal's operator names modes
		if output != "level" {
			return "", false
		}
		return map[streaming.Mode]string{0: "low", 1: "high"}[m], true
	}
	base := streaming.Output{Key: "s-1", TS: 5}
	level, sma := base, base
	level.Name, level.Value, level.Mode = "level", 21, 0
	sma.Name, sma.Value = "sma", 21
	recs, err := JSONOutputs{Modes: modes}.AppendRecords(nil, []streaming.Output{level, sma})
	require.NoError(t, err)
	require.Equal(t, `{"key":"s-1","name":"level","ts":5,"value":21,"mode":"low"}`, string(recs[0].Value))
	require.Equal(t, `{"key":"s-1","name":"sma","ts":5,"value":21}`, string(recs[1].Value))
}
