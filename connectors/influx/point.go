package influx

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tflo-io/tflo/streaming"
)

// Point is one derived signal as InfluxDB sees it:
//
//	<measurement>,mode=<mode>,sensor=<sensor> <field>=<value>[,...] <ts in ns>
//
// The series is (measurement, mode, sensor) and the timestamp is the
// record's event time, so a replayed record yields the same series and
// timestamp and overwrites its earlier point instead of adding one. (That
// holds as long as the replay recomputes the same mode, which deterministic
// operators guarantee.)
type Point struct {
	Measurement string
	Sensor      string // tag "sensor": the key (sensor id, symbol)
	Mode        string // tag "mode"; empty omits the tag
	TS          int64  // event time, unix nanoseconds
	// Fields are written in key order. Float and signal values are
	// written as floats, ints with the "i" suffix, bools as true/false;
	// None values are left out. At least one field must remain.
	Fields []Field
}

// Field is one field of a Point.
type Field struct {
	Key   string
	Value streaming.Computed
}

// SignalPoint makes the point of a typed signal with a float payload: the
// measurement given, tag sensor = s.Key, tag mode = the mode's decimal
// value (or modeName(s.Mode) when modeName is not nil), field "value".
func SignalPoint(measurement string, s streaming.Signal[streaming.Mode, float64], modeName func(streaming.Mode) string) Point {
	mode := strconv.Itoa(int(s.Mode))
	if modeName != nil {
		mode = modeName(s.Mode)
	}
	return Point{Measurement: measurement, Sensor: s.Key, Mode: mode, TS: s.TS,
		Fields: []Field{{Key: "value", Value: streaming.Float(s.Payload)}}}
}

// AppendLine appends p in line protocol (no trailing newline) to dst.
// The encoding is deterministic: the same point always gives the same
// bytes. It fails, leaving dst as it was, for an empty measurement or
// sensor, an empty or duplicate field key, a non-finite float, or a
// point with no field.
func AppendLine(dst []byte, p Point) ([]byte, error) {
	start := len(dst)
	fail := func(format string, args ...any) ([]byte, error) {
		return dst[:start], fmt.Errorf("influx point %q sensor %q ts %d: %s", p.Measurement, p.Sensor, p.TS, fmt.Sprintf(format, args...))
	}
	if p.Measurement == "" {
		return fail("empty measurement")
	}
	if p.Sensor == "" {
		return fail("empty sensor tag")
	}
	fields := p.Fields
	if !slices.IsSortedFunc(fields, cmpField) {
		fields = slices.SortedFunc(slices.Values(fields), cmpField)
	}
	dst = appendEscaped(dst, p.Measurement, measurementEscapes)
	// Tags in key order: mode < sensor.
	if p.Mode != "" {
		dst = append(dst, ",mode="...)
		dst = appendEscaped(dst, p.Mode, tagEscapes)
	}
	dst = append(dst, ",sensor="...)
	dst = appendEscaped(dst, p.Sensor, tagEscapes)
	n := 0
	for i, f := range fields {
		if f.Key == "" {
			return fail("field %d has an empty key", i)
		}
		if i > 0 && fields[i-1].Key == f.Key {
			return fail("field %q appears twice", f.Key)
		}
		if f.Value.IsNone() {
			continue
		}
		if n == 0 {
			dst = append(dst, ' ')
		} else {
			dst = append(dst, ',')
		}
		n++
		dst = appendEscaped(dst, f.Key, tagEscapes)
		dst = append(dst, '=')
		switch f.Value.Kind() {
		case streaming.KindInt:
			dst = strconv.AppendInt(dst, f.Value.Int64(), 10)
			dst = append(dst, 'i')
		case streaming.KindBool:
			dst = strconv.AppendBool(dst, f.Value.Truth())
		default:
			v := f.Value.Float64()
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fail("field %q is %v; InfluxDB stores finite floats only", f.Key, v)
			}
			dst = strconv.AppendFloat(dst, v, 'g', -1, 64)
		}
	}
	if n == 0 {
		return fail("no field with a value")
	}
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, p.TS, 10)
	return dst, nil
}

func cmpField(a, b Field) int { return strings.Compare(a.Key, b.Key) }

const (
	measurementEscapes = ", "
	tagEscapes         = ",= "
)

// appendEscaped appends s with line-protocol escapes: a backslash before
// each byte of special, and newlines (which line protocol cannot carry)
// replaced by an escaped space. Backslashes are left alone, as InfluxDB
// 1.x reads them literally.
func appendEscaped(dst []byte, s, special string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\n' || c == '\r':
			dst = append(dst, '\\', ' ')
			continue
		case strings.IndexByte(special, c) >= 0:
			dst = append(dst, '\\')
		}
		dst = append(dst, c)
	}
	return dst
}
