package kafka

import (
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/tflo-io/tflo/internal/jsonscan"
	"github.com/tflo-io/tflo/streaming"
)

// EnvelopeVersion is the version of the Signal envelope this build writes.
//
// Versions:
//
//	1: {"v":1,"key":...,"ts":...,"mode":...,"payload":...}
//	2: adds "compat", "source" {"topic","partition","offset"} and "epoch"
//	   (the owner epoch of the source position; SignalEnvelopes writes it
//	   only with a source), all optional: a version-1 reader ignores them
//	   and still reads key, ts, mode and payload.
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
// (see EnvelopeVersion) into the signal and the full envelope. An
// envelope without a ts (or a null one) is refused, not read at ts 0.
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
	// Every version writes ts: one without it (or null, which json leaves
	// at 0) is not a signal of 1970, and must not be read as one.
	var ts struct {
		TS *int64 `json:"ts"`
	}
	if err := json.Unmarshal(b, &ts); err != nil || ts.TS == nil {
		return streaming.Signal[M, P]{}, env, fmt.Errorf("decode signal envelope of key %s: missing ts", streaming.QuoteKey(env.Key))
	}
	return streaming.Signal[M, P]{Key: env.Key, TS: env.TS, Mode: env.Mode, Payload: env.Payload}, env, nil
}

// DecodeSignalFields decodes an envelope as
// DecodeSignal[any, map[string]json.RawMessage] does, and sets vals[i] to
// the raw JSON value of the payload field names[i] (nil when the payload
// has no such field). key aliases b. On the common shape of an envelope
// (what EncodeSignal writes) it builds no map and allocates nothing; on
// anything else it is DecodeSignal (FuzzDecodeSignalFields checks that the
// two agree).
func DecodeSignalFields(b []byte, names []string, vals [][]byte) (key []byte, ts int64, err error) {
	if key, ts, ok := scanSignal(b, names, vals); ok {
		return key, ts, nil
	}
	return slowSignalFields(b, names, vals)
}

func slowSignalFields(b []byte, names []string, vals [][]byte) ([]byte, int64, error) {
	sig, _, err := DecodeSignal[any, map[string]json.RawMessage](b)
	if err != nil {
		return nil, 0, err
	}
	for i, n := range names {
		vals[i] = nil
		if v, ok := sig.Payload[n]; ok {
			vals[i] = v
		}
	}
	return []byte(sig.Key), sig.TS, nil
}

// envelopeFields are the envelope's field names, in scanSignal's order
// (the field* indexes).
var envelopeFields = []string{"v", "compat", "key", "ts", "mode", "payload", "source", "epoch"}

const (
	fieldV = iota
	fieldCompat
	fieldKey
	fieldTS
	fieldMode
	fieldPayload
	fieldSource
	fieldEpoch
)

// scanSignal is DecodeSignalFields' fast path (internal/jsonscan): false
// for anything but a valid envelope of the common shape (each field once
// and spelt exactly, see jsonscan.Fields), which DecodeSignal then decodes
// or refuses with its own error.
func scanSignal(b []byte, names []string, vals [][]byte) (key []byte, ts int64, ok bool) {
	clear(vals)
	var v, compat int64
	hasTS := false
	end := jsonscan.Fields(b, jsonscan.WS(b, 0), envelopeFields, func(k, i int) int {
		switch k {
		case fieldV:
			n, _, j := jsonscan.IntAt(b, i)
			v = n
			return j
		case fieldCompat:
			n, _, j := jsonscan.IntAt(b, i)
			compat = n
			return j
		case fieldTS:
			n, null, j := jsonscan.IntAt(b, i)
			ts, hasTS = n, !null
			return j
		case fieldKey:
			s, j := jsonscan.StringAt(b, i)
			key = s
			return j
		case fieldMode: // any JSON value
			return jsonscan.SkipValue(b, i)
		case fieldPayload:
			if jsonscan.Null(b, i) {
				return i + 4
			}
			return jsonscan.Members(b, i, names, vals)
		case fieldSource:
			if jsonscan.Null(b, i) {
				return i + 4
			}
			return scanSource(b, i)
		}
		return scanEpoch(b, i) // fieldEpoch
	})
	if end < 0 || jsonscan.WS(b, end) != len(b) || int64(int(v)) != v || int64(int(compat)) != compat { // v and compat are ints
		return nil, 0, false
	}
	if compat == 0 {
		compat = v
	}
	if v < 1 || compat > EnvelopeVersion || len(key) == 0 || !hasTS {
		return nil, 0, false // DecodeSignal words the error (or, for an empty key, its caller)
	}
	return key, ts, true
}

var sourceFields = []string{"topic", "partition", "offset"}

// scanSource reads the envelope's source object (EnvelopeSource) at b[i]
// and returns the index after it, or -1.
func scanSource(b []byte, i int) int {
	return jsonscan.Fields(b, i, sourceFields, func(k, i int) int {
		if k == 0 {
			_, j := jsonscan.StringAt(b, i)
			return j
		}
		n, _, j := jsonscan.IntAt(b, i)
		if k == 1 && int64(int32(n)) != n {
			return -1
		}
		return j
	})
}

// scanEpoch reads the envelope's epoch (null or a uint64) at b[i] and
// returns the index after it, or -1.
func scanEpoch(b []byte, i int) int {
	if jsonscan.Null(b, i) {
		return i + 4
	}
	j := jsonscan.Number(b, i)
	if j < 0 || b[i] == '-' {
		return -1
	}
	if _, err := strconv.ParseUint(string(b[i:j]), 10, 64); err != nil {
		return -1
	}
	return j
}
