package kafka

import (
	"encoding/json"
	"fmt"

	"github.com/tflo-io/tflo/streaming"
)

// EnvelopeVersion is the version of the Signal envelope this build writes.
//
// Versions:
//
//	1: {"v":1,"key":...,"ts":...,"mode":...,"payload":...}
//	2: adds "compat", "source" {"topic","partition","offset"} and "epoch",
//	   all optional: a version-1 reader ignores them and still reads
//	   key, ts, mode and payload.
//
// How a reader copes with other versions: "compat" is the oldest reader
// version that can read the envelope (absent means equal to "v"). A writer
// bumps "v" with every change but raises "compat" only for a change an
// older reader would misread (a renamed or re-typed field). A reader
// accepts any envelope with compat <= its own version, reading the fields
// it knows and ignoring the others (json's default); older envelopes read
// with the newer fields at their zero value (Source nil, Epoch 0). An
// envelope with a higher compat is refused with ErrUnsupportedEnvelope,
// never half-read.
const EnvelopeVersion = 2

// EnvelopeSource names the input record a signal was derived from.
type EnvelopeSource struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// Envelope is the wire form of a streaming.Signal on a Kafka topic.
type Envelope[M comparable, P any] struct {
	V       int             `json:"v"`
	Compat  int             `json:"compat,omitempty"`
	Key     string          `json:"key"`
	TS      int64           `json:"ts"`
	Mode    M               `json:"mode"`
	Payload P               `json:"payload"`
	Source  *EnvelopeSource `json:"source,omitempty"`
	Epoch   uint64          `json:"epoch,omitempty"`
}

// HeaderEnvelope is the record header naming the envelope kind and
// version ("signal/2"), so consumers can route without parsing.
const HeaderEnvelope = "tflo-envelope"

// EncodeSignal encodes sig as a current-version envelope. src (may be nil)
// and epoch record where the signal came from.
func EncodeSignal[M comparable, P any](sig streaming.Signal[M, P], src *EnvelopeSource, epoch streaming.Epoch) ([]byte, error) {
	env := Envelope[M, P]{V: EnvelopeVersion, Compat: 1, Key: sig.Key, TS: sig.TS, Mode: sig.Mode, Payload: sig.Payload, Source: src, Epoch: uint64(epoch)}
	b, err := json.Marshal(env)
	if err != nil {
		return nil, fmt.Errorf("encode signal of key %s: %w", streaming.QuoteKey(sig.Key), err)
	}
	return b, nil
}

// DecodeSignal decodes an envelope of any version this build can read
// (see EnvelopeVersion) into the signal and the full envelope.
func DecodeSignal[M comparable, P any](b []byte) (streaming.Signal[M, P], Envelope[M, P], error) {
	var env Envelope[M, P]
	if err := json.Unmarshal(b, &env); err != nil {
		return streaming.Signal[M, P]{}, env, fmt.Errorf("decode signal envelope: %w", err)
	}
	if env.V < 1 {
		return streaming.Signal[M, P]{}, env, fmt.Errorf("decode signal envelope: missing or invalid version %d", env.V)
	}
	compat := env.Compat
	if compat == 0 {
		compat = env.V
	}
	if compat > EnvelopeVersion {
		return streaming.Signal[M, P]{}, env, fmt.Errorf("signal envelope version %d needs a reader of version %d, this build reads up to %d: %w",
			env.V, compat, EnvelopeVersion, ErrUnsupportedEnvelope)
	}
	return streaming.Signal[M, P]{Key: env.Key, TS: env.TS, Mode: env.Mode, Payload: env.Payload}, env, nil
}
