package kafka

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/tflo-io/tflo/internal/jsonscan"
	"github.com/tflo-io/tflo/streaming"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Decoded is one record decoded for the keyed graph.
type Decoded struct {
	// Key selects the per-key graph instance (the sensor id). It may alias
	// the record's bytes; the Source copies it when it keeps it.
	Key []byte
	// TS is the event time.
	TS int64
	// Inputs has one slot per graph input, zeroed (None) before each
	// Decode; the decoder fills the slots it knows.
	Inputs []streaming.Computed
}

// Decoder turns a Kafka record into a Decoded. It is called on the
// partition's goroutine (one call at a time per partition, concurrently
// across partitions), so it must not keep per-call state without a lock.
// rec and its bytes are only valid during the call. An error sends the
// record to the dead-letter topic; the stream continues.
type Decoder interface {
	Decode(rec *kgo.Record, d *Decoded) error
}

// DecoderFunc adapts a function to Decoder.
type DecoderFunc func(rec *kgo.Record, d *Decoded) error

// Decode calls f.
func (f DecoderFunc) Decode(rec *kgo.Record, d *Decoded) error { return f(rec, d) }

// JSONReadingDecoder decodes sensor readings
// {"sensor":"s-1","ts":1700000000000,"value":21.5} into Key=sensor, TS=ts
// and Inputs[0]=Float(value). Unknown fields are ignored; sensor, ts and
// value are required (null counts as missing).
//
// Decoding is the known per-event cost of the hot path, so the decoder
// first tries a hand-written scanner (internal/jsonscan) that covers the
// common shape (no escapes or non-ASCII bytes in strings, exact field
// names) without allocating; on
// anything else it falls back to encoding/json, whose semantics it keeps
// (the fuzz test checks both agree). BenchmarkDecodeJSON measures both.
type JSONReadingDecoder struct{}

var _ Decoder = JSONReadingDecoder{}

var errFallback = errors.New("fallback")

// Decode implements Decoder.
func (JSONReadingDecoder) Decode(rec *kgo.Record, d *Decoded) error {
	key, ts, v, err := scanReading(rec.Value)
	if err == errFallback {
		key, ts, v, err = slowReading(rec.Value)
	}
	if err != nil {
		return err
	}
	d.Key, d.TS = key, ts
	if len(d.Inputs) > 0 {
		d.Inputs[0] = streaming.Float(v)
	}
	return nil
}

type jsonReading struct {
	Sensor *string  `json:"sensor"`
	TS     *int64   `json:"ts"`
	Value  *float64 `json:"value"`
}

func slowReading(b []byte) ([]byte, int64, float64, error) {
	var r jsonReading
	if err := json.Unmarshal(b, &r); err != nil {
		// A field of the wrong type in the reading's words, not in
		// encoding/json's ("cannot unmarshal string into Go struct field
		// jsonReading.ts of type int64"): the dead letter's reason.
		// Worded as the MQTT source's reading errors are.
		if field, got, ok := jsonscan.TypeError(err); ok {
			if field == "" {
				return nil, 0, 0, fmt.Errorf("sensor reading: want a JSON object with sensor, ts and value, got %s", got)
			}
			if want, ok := readingFieldKinds[field]; ok {
				return nil, 0, 0, fmt.Errorf("sensor reading: field %q is %s, want %s", field, got, want)
			}
		}
		return nil, 0, 0, fmt.Errorf("sensor reading: %w", err)
	}
	return checkReading(r.Sensor, r.TS, r.Value)
}

func checkReading(sensor *string, ts *int64, value *float64) ([]byte, int64, float64, error) {
	switch {
	case sensor == nil || *sensor == "":
		return nil, 0, 0, errors.New(`sensor reading: missing "sensor"`)
	case ts == nil:
		return nil, 0, 0, errors.New(`sensor reading: missing "ts"`)
	case value == nil:
		return nil, 0, 0, errors.New(`sensor reading: missing "value"`)
	}
	return []byte(*sensor), *ts, *value, nil
}

var readingFields = []string{"sensor", "ts", "value"}

// readingFieldKinds says what each field of a reading holds.
var readingFieldKinds = map[string]string{
	"sensor": "a string",
	"ts":     "an integer of Unix milliseconds (or of the spec's time_unit)",
	"value":  "a number",
}

// scanReading is the fast path (internal/jsonscan). It returns
// errFallback for anything outside the shape it handles (see
// jsonscan.Fields), and for a reading the slow path refuses, so that
// encoding/json decides and words the error.
func scanReading(b []byte) (key []byte, ts int64, v float64, err error) {
	var haveTS, haveV bool
	end := jsonscan.Fields(b, jsonscan.WS(b, 0), readingFields, func(k, i int) int {
		switch k {
		case 0:
			s, j := jsonscan.StringAt(b, i)
			key = s
			return j
		case 1:
			n, null, j := jsonscan.IntAt(b, i)
			ts, haveTS = n, !null
			return j
		}
		if jsonscan.Null(b, i) {
			return i + 4
		}
		j := jsonscan.Number(b, i)
		if j < 0 {
			return -1
		}
		f, perr := strconv.ParseFloat(string(b[i:j]), 64)
		if perr != nil {
			return -1
		}
		v, haveV = f, true
		return j
	})
	if end < 0 || jsonscan.WS(b, end) != len(b) || len(key) == 0 || !haveTS || !haveV {
		return nil, 0, 0, errFallback
	}
	return key, ts, v, nil
}
