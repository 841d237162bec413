package kafka

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

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
// first tries a hand-written scanner that covers the common shape (flat
// object, no escapes in strings, exact field names) without allocating; on
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

// scanReading is the fast path. It returns errFallback for anything
// outside the shape it handles, so that encoding/json decides.
func scanReading(b []byte) (key []byte, ts int64, v float64, err error) {
	i := skipWS(b, 0)
	if i >= len(b) || b[i] != '{' {
		return nil, 0, 0, errFallback
	}
	i = skipWS(b, i+1)
	var haveKey, haveTS, haveV bool
	if i < len(b) && b[i] == '}' {
		i++
	} else {
		for {
			var name []byte
			if name, i = scanString(b, i); name == nil {
				return nil, 0, 0, errFallback
			}
			i = skipWS(b, i)
			if i >= len(b) || b[i] != ':' {
				return nil, 0, 0, errFallback
			}
			i = skipWS(b, i+1)
			if i >= len(b) {
				return nil, 0, 0, errFallback
			}
			isNull := len(b)-i >= 4 && string(b[i:i+4]) == "null"
			switch string(name) {
			case "sensor":
				if isNull {
					haveKey, key, i = false, nil, i+4
					break
				}
				var s []byte
				if s, i = scanString(b, i); s == nil {
					return nil, 0, 0, errFallback
				}
				key, haveKey = s, true
			case "ts":
				if isNull {
					haveTS, i = false, i+4
					break
				}
				j := scanNumber(b, i)
				if j < 0 {
					return nil, 0, 0, errFallback
				}
				n, ok := parseSmallInt(b[i:j])
				if !ok {
					var perr error
					if n, perr = strconv.ParseInt(string(b[i:j]), 10, 64); perr != nil {
						return nil, 0, 0, errFallback
					}
				}
				ts, haveTS, i = n, true, j
			case "value":
				if isNull {
					haveV, i = false, i+4
					break
				}
				j := scanNumber(b, i)
				if j < 0 {
					return nil, 0, 0, errFallback
				}
				f, perr := strconv.ParseFloat(string(b[i:j]), 64)
				if perr != nil {
					return nil, 0, 0, errFallback
				}
				v, haveV, i = f, true, j
			default:
				// encoding/json matches field names case-insensitively.
				if bytes.EqualFold(name, []byte("sensor")) || bytes.EqualFold(name, []byte("ts")) || bytes.EqualFold(name, []byte("value")) {
					return nil, 0, 0, errFallback
				}
				if i = skipScalar(b, i); i < 0 {
					return nil, 0, 0, errFallback
				}
			}
			i = skipWS(b, i)
			if i >= len(b) {
				return nil, 0, 0, errFallback
			}
			if b[i] == ',' {
				i = skipWS(b, i+1)
				continue
			}
			if b[i] == '}' {
				i++
				break
			}
			return nil, 0, 0, errFallback
		}
	}
	if skipWS(b, i) != len(b) {
		return nil, 0, 0, errFallback
	}
	if !haveKey || len(key) == 0 || !haveTS || !haveV {
		return nil, 0, 0, errFallback // let the slow path word the error
	}
	return key, ts, v, nil
}

func skipWS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// scanString returns the contents of the string at b[i] and the index after
// it, or nil for anything with escapes or control or non-ASCII bytes.
func scanString(b []byte, i int) ([]byte, int) {
	if i >= len(b) || b[i] != '"' {
		return nil, i
	}
	for j := i + 1; j < len(b); j++ {
		c := b[j]
		if c == '"' {
			return b[i+1 : j : j], j + 1
		}
		if c == '\\' || c < 0x20 || c >= 0x80 {
			return nil, i
		}
	}
	return nil, i
}

// scanNumber returns the end of the JSON number at b[i], or -1.
func scanNumber(b []byte, i int) int {
	j := i
	if j < len(b) && b[j] == '-' {
		j++
	}
	if j >= len(b) {
		return -1
	}
	if b[j] == '0' {
		j++
	} else if b[j] >= '1' && b[j] <= '9' {
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
	} else {
		return -1
	}
	if j < len(b) && b[j] == '.' {
		j++
		k := j
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		if j == k {
			return -1
		}
	}
	if j < len(b) && (b[j] == 'e' || b[j] == 'E') {
		j++
		if j < len(b) && (b[j] == '+' || b[j] == '-') {
			j++
		}
		k := j
		for j < len(b) && b[j] >= '0' && b[j] <= '9' {
			j++
		}
		if j == k {
			return -1
		}
	}
	return j
}

// skipScalar skips an ignored field's value: a plain string, number, true,
// false or null. Objects and arrays go to the slow path.
func skipScalar(b []byte, i int) int {
	switch {
	case b[i] == '"':
		if s, j := scanString(b, i); s != nil {
			return j
		}
		return -1
	case b[i] == '-' || (b[i] >= '0' && b[i] <= '9'):
		return scanNumber(b, i)
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
			return i + len(lit)
		}
	}
	return -1
}

// parseSmallInt parses a JSON integer of at most 18 digits (which cannot
// overflow int64) without strconv; false for anything else.
func parseSmallInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	if neg {
		n = -n
	}
	return n, true
}
