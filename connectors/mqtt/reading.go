package mqtt

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/tflo-io/tflo/internal/jsonscan"
)

// Reading is one sensor reading: the payload format of the MQTT source.
//
// On the wire it is a JSON object
//
//	{"sensor":"boiler-1","ts":1767225600000,"value":21.5}
//	{"sensor":"boiler-1","ts":"2026-01-01T00:00:00.000Z","value":21.5}
//
// where ts is either a JSON number of Unix milliseconds (an integer; a
// fraction is truncated toward zero) or an RFC 3339 string (with optional
// fractional seconds and any offset), converted to Unix milliseconds
// (to another unit by DecodeReadingIn).
// Unknown fields are ignored so producers can add fields. sensor must be
// a non-empty string, value a finite number; all three fields are required.
type Reading struct {
	Sensor string  `json:"sensor"`
	TS     int64   `json:"ts"` // Unix milliseconds
	Value  float64 `json:"value"`
}

// Decoder turns a payload into a Reading. Errors should wrap ErrMalformed;
// the source sends the payload to the dead-letter topic with the error
// text as the reason. A Decoder must not retain payload.
type Decoder func(payload []byte) (Reading, error)

// TopicDecoder is a Decoder that is also given the topic the message was
// published on (a sensor id in its last level, say). It must not retain
// payload either.
type TopicDecoder func(topic string, payload []byte) (Reading, error)

type wireReading struct {
	Sensor *string          `json:"sensor"`
	TS     json.RawMessage  `json:"ts"`
	Value  *json.RawMessage `json:"value"`
}

// DecodeReading decodes a JSON reading (see Reading for the format). It is
// the default Decoder. Errors wrap ErrMalformed and say which field is
// wrong. The common shape (strings of plain ASCII, each field once) is
// read by a scanner that allocates only the sensor's string; anything
// else goes through encoding/json (FuzzDecodeReading checks both agree).
func DecodeReading(payload []byte) (Reading, error) {
	return decodeReading(payload, time.Millisecond)
}

// DecodeReadingIn returns the Decoder of readings whose event time is in
// unit (a pipeline's time_unit): DecodeReading, but an RFC 3339 ts is
// converted to unit instead of milliseconds (a number is taken as it
// is). DecodeReadingIn(time.Millisecond) is DecodeReading.
func DecodeReadingIn(unit time.Duration) Decoder {
	if unit == time.Millisecond {
		return DecodeReading
	}
	return func(payload []byte) (Reading, error) { return decodeReading(payload, unit) }
}

func decodeReading(payload []byte, unit time.Duration) (Reading, error) {
	if r, ok := scanReading(payload, unit); ok {
		return r, nil
	}
	return slowReading(payload, unit)
}

func slowReading(payload []byte, unit time.Duration) (Reading, error) {
	var w wireReading
	if err := json.Unmarshal(payload, &w); err != nil {
		// A value of the wrong type in the reading's words, not in
		// encoding/json's ("cannot unmarshal array into Go value of type
		// mqtt.wireReading"), as the Kafka reading decoder words it.
		if field, got, ok := jsonscan.TypeError(err); ok {
			switch field {
			case "":
				return Reading{}, fmt.Errorf("%w: want a JSON object with sensor, ts and value, got %s", ErrMalformed, got)
			case "sensor": // ts and value are read as they come
				return Reading{}, fmt.Errorf("%w: field \"sensor\" is %s, want a string", ErrMalformed, got)
			}
		}
		return Reading{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if w.Sensor == nil || *w.Sensor == "" {
		return Reading{}, fmt.Errorf("%w: field \"sensor\" is missing or empty", ErrMalformed)
	}
	ts, err := parseTS(w.TS, unit)
	if err != nil {
		return Reading{}, err
	}
	if w.Value == nil {
		return Reading{}, fmt.Errorf("%w: field \"value\" is missing", ErrMalformed)
	}
	raw := bytes.TrimSpace(*w.Value)
	v, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return Reading{}, fmt.Errorf("%w: field \"value\" is %s, want a finite number", ErrMalformed, clip(raw))
	}
	return Reading{Sensor: *w.Sensor, TS: ts, Value: v}, nil
}

var readingFields = []string{"sensor", "ts", "value"}

// scanReading is DecodeReading's fast path (internal/jsonscan): false for
// anything outside the shape it reads, and for a reading encoding/json's
// path refuses, which then words the error.
func scanReading(b []byte, unit time.Duration) (Reading, bool) {
	var sensor, ts, value []byte
	end := jsonscan.Fields(b, jsonscan.WS(b, 0), readingFields, func(k, i int) int {
		switch k {
		case 0:
			s, j := jsonscan.StringAt(b, i)
			sensor = s
			return j
		case 1:
			j := jsonscan.SkipScalar(b, i) // parseTS reads it
			ts = b[i:max(j, i)]
			return j
		}
		j := jsonscan.Number(b, i)
		value = b[i:max(j, i)]
		return j
	})
	if end < 0 || jsonscan.WS(b, end) != len(b) || len(sensor) == 0 {
		return Reading{}, false
	}
	t, err := parseTS(ts, unit)
	if err != nil {
		return Reading{}, false
	}
	v, err := strconv.ParseFloat(string(value), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return Reading{}, false
	}
	return Reading{Sensor: string(sensor), TS: t, Value: v}, true
}

func parseTS(raw json.RawMessage, unit time.Duration) (int64, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return 0, fmt.Errorf("%w: field \"ts\" is missing", ErrMalformed)
	}
	if raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return 0, fmt.Errorf("%w: field \"ts\": %v", ErrMalformed, err)
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return 0, fmt.Errorf("%w: field \"ts\" is %q, want Unix milliseconds or RFC 3339", ErrMalformed, clip([]byte(s)))
		}
		return unixIn(t, unit), nil
	}
	if n, err := strconv.ParseInt(string(raw), 10, 64); err == nil {
		return n, nil
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil || math.IsNaN(f) || f >= math.MaxInt64 || f <= math.MinInt64 {
		return 0, fmt.Errorf("%w: field \"ts\" is %s, want Unix milliseconds or RFC 3339", ErrMalformed, clip(raw))
	}
	return int64(f), nil
}

// unixIn is t since the Unix epoch in unit.
func unixIn(t time.Time, unit time.Duration) int64 {
	switch unit {
	case time.Second:
		return t.Unix()
	case time.Millisecond:
		return t.UnixMilli()
	case time.Microsecond:
		return t.UnixMicro()
	}
	return t.UnixNano() / int64(unit)
}

// EncodeReading appends r as JSON with ts in Unix milliseconds; the inverse
// of DecodeReading, for publishers and tests.
func EncodeReading(dst []byte, r Reading) []byte {
	dst = append(dst, `{"sensor":`...)
	q, _ := json.Marshal(r.Sensor) // a string always marshals
	dst = append(dst, q...)
	dst = append(dst, `,"ts":`...)
	dst = strconv.AppendInt(dst, r.TS, 10)
	dst = append(dst, `,"value":`...)
	dst = strconv.AppendFloat(dst, r.Value, 'g', -1, 64)
	return append(dst, '}')
}

// clip shortens b for an error message so a huge payload does not end up
// in logs whole.
func clip(b []byte) string {
	const max = 64
	if len(b) > max {
		return string(b[:max]) + "…"
	}
	return string(b)
}
