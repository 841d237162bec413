package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/internal/jsonscan"
	"github.com/tflo-io/tflo/streaming"
)

// Message is one input message as its source received it. Its slices are
// only valid during Decoder.Decode.
type Message struct {
	// Topic is the Kafka or MQTT topic.
	Topic string
	Key   []byte // the Kafka record key (nil for MQTT)
	Value []byte // the payload
}

// Record is a decoded message: the key of the graph instance it runs
// through, its event time and the graph's inputs.
type Record struct {
	// Key selects the per-key graph instance; it may alias the message.
	Key []byte
	// TS is the event time, in the pipeline's time unit.
	TS int64
	// Inputs has one slot per graph input, None before each Decode; the
	// decoder fills the slots it has values for.
	Inputs []streaming.Computed
}

// Decoder turns a message into a Record. It is called from one shard's
// goroutine at a time (concurrently across shards), so it must not keep
// per-call state without a lock. An error sends the message to the
// dead-letter destination with the error as the reason; the stream goes
// on.
type Decoder interface {
	Decode(m Message, r *Record) error
}

// DecoderFunc adapts a function to Decoder.
type DecoderFunc func(m Message, r *Record) error

// Decode calls f.
func (f DecoderFunc) Decode(m Message, r *Record) error { return f(m, r) }

// InputBinder is an optional capability of a Decoder that reads graph
// inputs by field name: before the pipeline starts, the runtime calls
// BindInputs with the record field of each graph input (Input.Field), in
// order, and decodes with the Decoder it returns.
type InputBinder interface {
	BindInputs(fields []string) (Decoder, error)
}

// ReadingDecoder decodes sensor readings
// {"sensor":"s-1","ts":1700000000000,"value":21.5}: key = sensor, ts,
// and the graph's one input = value. It is the default decoder. On Kafka
// it is connectors/kafka's allocation-free JSONReadingDecoder; on MQTT the
// MQTT source's reading decoder (which also takes RFC 3339 timestamps,
// converted to the pipeline's time unit: mqtt.DecodeReadingIn).
type ReadingDecoder struct{}

// BindInputs accepts exactly one input, read from the field "value".
func (ReadingDecoder) BindInputs(fields []string) (Decoder, error) {
	if len(fields) != 1 || fields[0] != "value" {
		return nil, fmt.Errorf("the reading decoder fills one input from the field \"value\", the graph reads %q", fields)
	}
	return ReadingDecoder{}, nil
}

// Decode implements Decoder.
func (ReadingDecoder) Decode(m Message, r *Record) error {
	d := kafka.Decoded{Inputs: r.Inputs}
	if err := (kafka.JSONReadingDecoder{}).Decode(&kgo.Record{Value: m.Value}, &d); err != nil {
		return err
	}
	r.Key, r.TS = d.Key, d.TS
	return nil
}

// JSONDecoder decodes flat JSON objects: Key names the field holding the
// record's key (a string, or a number taken as its text), Time the field
// holding its event time (an integer), and each graph input is read from
// its field: a number, or a boolean. An input whose field is absent or
// null is None for that record (nodes fed by it skip it). Unknown fields
// are ignored.
type JSONDecoder struct {
	Key  string
	Time string
}

type jsonBound struct {
	key, time string
	fields    []string
	names     []string // key, time, then fields: the members Decode reads
}

// BindInputs implements InputBinder.
func (d JSONDecoder) BindInputs(fields []string) (Decoder, error) {
	if missing := jsonMissing(d.Key, d.Time); missing != "" {
		return nil, fmt.Errorf("the json decoder needs its %s (JSONDecoder.Key and .Time name the key and time fields)", missing)
	}
	return jsonBound{key: d.Key, time: d.Time, fields: fields, names: append([]string{d.Key, d.Time}, fields...)}, nil
}

// jsonMissing names the settings of a json decoder left empty: "key
// field", "time field", "key and time fields", or "" for none.
func jsonMissing(key, time string) string {
	switch {
	case key == "" && time == "":
		return "key and time fields"
	case key == "":
		return "key field"
	case time == "":
		return "time field"
	}
	return ""
}

// Decode refuses to run unbound: the runtime always binds a JSONDecoder.
func (d JSONDecoder) Decode(Message, *Record) error {
	return errors.New("json decoder: BindInputs was not called")
}

// Decode reads the members it needs with internal/jsonscan, allocation
// free, and decodes anything that scanner gives up on (escapes, non-ASCII
// strings, bad syntax) as encoding/json does into a
// map[string]json.RawMessage (FuzzJSONDecoder checks both agree).
func (d jsonBound) Decode(m Message, r *Record) error {
	var buf [10][]byte
	vals := buf[:0]
	if len(d.names) > len(buf) {
		vals = make([][]byte, 0, len(d.names))
	}
	vals = vals[:len(d.names)]
	if end := jsonscan.Members(m.Value, jsonscan.WS(m.Value, 0), d.names, vals); end < 0 || jsonscan.WS(m.Value, end) != len(m.Value) {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(m.Value, &obj); err != nil {
			// Not an object: say what it wants, not encoding/json's
			// "cannot unmarshal array into Go value of type map[...]".
			if _, got, ok := jsonscan.TypeError(err); ok {
				return fmt.Errorf("json record: want a JSON object with key field %q and time field %q, got %s", d.key, d.time, got)
			}
			return fmt.Errorf("json record: %w", err)
		}
		for i, n := range d.names {
			vals[i] = obj[n]
		}
	}
	k := vals[0]
	if isNull(k) {
		return fmt.Errorf("json record: missing key field %q", d.key)
	}
	if k[0] == '"' {
		if s, end := jsonscan.String(k, 0); s != nil && end == len(k) {
			k = s
		} else {
			var s string
			if err := json.Unmarshal(k, &s); err != nil {
				return fmt.Errorf("json record: key field %q is not a non-empty string", d.key)
			}
			k = []byte(s)
		}
		if len(k) == 0 {
			return fmt.Errorf("json record: key field %q is not a non-empty string", d.key)
		}
	} else if _, err := strconv.ParseFloat(string(k), 64); err != nil && !errors.Is(err, strconv.ErrRange) {
		// Out of a float's range is still a number: its text is the key.
		return fmt.Errorf("json record: key field %q is %s, want a string or a number", d.key, clip(k))
	}
	r.Key = k
	t := vals[1]
	if isNull(t) {
		return fmt.Errorf("json record: missing time field %q", d.time)
	}
	ts, err := strconv.ParseInt(string(t), 10, 64)
	if err != nil {
		return fmt.Errorf("json record: time field %q is %s, want an integer", d.time, clip(t))
	}
	r.TS = ts
	for i, f := range d.fields {
		v := vals[2+i]
		if isNull(v) {
			continue
		}
		c, err := jsonValue(v)
		if err != nil {
			return fmt.Errorf("json record: field %q: %w", f, err)
		}
		r.Inputs[i] = c
	}
	return nil
}

func jsonValue(v json.RawMessage) (streaming.Computed, error) {
	switch string(v) {
	case "true":
		return streaming.Bool(true), nil
	case "false":
		return streaming.Bool(false), nil
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return streaming.Computed{}, fmt.Errorf("%s is not a finite number or a boolean", clip(v))
	}
	return streaming.Float(f), nil
}

func isNull(v json.RawMessage) bool { return len(v) == 0 || string(v) == "null" }

func clip(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}

// SignalEnvelopeDecoder decodes connectors/kafka's signal envelopes (what
// a pipeline's KafkaSink with format signal_envelope publishes, the
// iot-portal edge's alarms): key = the envelope's key, ts = its ts, and
// each graph input is read from the payload field of its name (a number
// or a boolean; absent or null: None).
type SignalEnvelopeDecoder struct{}

type envelopeBound struct{ fields []string }

// BindInputs implements InputBinder.
func (SignalEnvelopeDecoder) BindInputs(fields []string) (Decoder, error) {
	return envelopeBound{fields: fields}, nil
}

// Decode refuses to run unbound: the runtime always binds it.
func (SignalEnvelopeDecoder) Decode(Message, *Record) error {
	return errors.New("signal envelope decoder: BindInputs was not called")
}

func (d envelopeBound) Decode(m Message, r *Record) error {
	var buf [8][]byte
	vals := buf[:0]
	if len(d.fields) > len(buf) {
		vals = make([][]byte, 0, len(d.fields))
	}
	vals = vals[:len(d.fields)]
	key, ts, err := kafka.DecodeSignalFields(m.Value, d.fields, vals)
	if err != nil {
		return err
	}
	if len(key) == 0 {
		return errors.New("signal envelope without a key")
	}
	r.Key, r.TS = key, ts
	for i, v := range vals {
		if isNull(v) {
			continue
		}
		c, err := jsonValue(v)
		if err != nil {
			return fmt.Errorf("signal envelope: payload field %q: %w", d.fields[i], err)
		}
		r.Inputs[i] = c
	}
	return nil
}

// limitedDecoder applies the pipeline's Limits to what its decoder made
// of a message: a record outside them fails decoding, so it is
// dead-lettered with the reason (Evaluate counts it as rejected).
type limitedDecoder struct {
	inner Decoder
	check *streaming.LimitCheck
}

func (d limitedDecoder) Decode(m Message, r *Record) error {
	if err := d.inner.Decode(m, r); err != nil {
		return err
	}
	return d.check.Check(r.Key, r.TS, r.Inputs)
}

// bindDecoder binds d to the graph's input fields when it reads by name.
func bindDecoder(d Decoder, fields []string) (Decoder, error) {
	if b, ok := d.(InputBinder); ok {
		return b.BindInputs(fields)
	}
	return d, nil
}
