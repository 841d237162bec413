package influx

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

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
// bytes. It fails, leaving dst as it was, for a point InfluxDB would
// refuse or read back differently (see CheckPoint).
func AppendLine(dst []byte, p Point) ([]byte, error) {
	start := len(dst)
	fail := func(format string, args ...any) ([]byte, error) {
		return dst[:start], &PointError{Measurement: p.Measurement, Sensor: p.Sensor, TS: p.TS, Reason: fmt.Sprintf(format, args...)}
	}
	if p.Measurement == "" {
		return fail("empty measurement")
	}
	if p.Sensor == "" {
		return fail("empty sensor tag")
	}
	if why := checkToken(p.Measurement); why != "" {
		return fail("measurement %s", why)
	}
	if p.Measurement[0] == '#' {
		return fail("measurement starts with '#', which makes the line a comment")
	}
	if why := checkToken(p.Sensor); why != "" {
		return fail("sensor tag %s", why)
	}
	if why := checkToken(p.Mode); why != "" {
		return fail("mode tag %s", why)
	}
	if p.TS < minNanoTime || p.TS > maxNanoTime {
		return fail("timestamp outside InfluxDB's range %d..%d", minNanoTime, maxNanoTime)
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
	keyLen := len(dst) - start
	n := 0
	for i, f := range fields {
		if f.Key == "" {
			return fail("field %d has an empty key", i)
		}
		if i > 0 && fields[i-1].Key == f.Key {
			return fail("field %s appears twice", streaming.QuoteKey(f.Key))
		}
		if f.Key == "time" {
			return fail(`field key "time" is reserved by InfluxDB`)
		}
		if why := checkToken(f.Key); why != "" {
			return fail("field key %s", why)
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
		fieldStart := len(dst)
		dst = appendEscaped(dst, f.Key, tagEscapes)
		// InfluxDB's series key: measurement and tags, "#!~#", field key.
		if size := keyLen + len("#!~#") + len(dst) - fieldStart; size > maxKeyLength {
			return fail("series key of field %s is %d bytes, over InfluxDB's %d", streaming.QuoteKey(f.Key), size, maxKeyLength)
		}
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
				return fail("field %s is %v; InfluxDB stores finite floats only", streaming.QuoteKey(f.Key), v)
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

// CheckPoint reports whether AppendLine can encode p: nil, or the
// *PointError it would return.
func CheckPoint(p Point) error {
	_, err := AppendLine(nil, p)
	return err
}

func cmpField(a, b Field) int { return strings.Compare(a.Key, b.Key) }

// Limits of InfluxDB 1.8's parser (models.MinNanoTime, MaxNanoTime,
// MaxKeyLength): a point outside them fails the whole request.
const (
	minNanoTime  = math.MinInt64 + 2
	maxNanoTime  = math.MaxInt64 - 1
	maxKeyLength = 65535
)

const (
	measurementEscapes = ", "
	tagEscapes         = ",= "
)

// checkToken returns why s (a measurement, tag value or field key) cannot
// be written so that InfluxDB reads back exactly s, or "".
//
// InfluxDB drops a series whose measurement or tags are not valid UTF-8
// or hold a non-printable character (a newline, a tab, NUL, U+FFFD). Its
// parser unescapes only a backslash followed by ',', ' ', '=' (and '"'),
// and keeps any other backslash as it is; but while it splits a line into
// parts, a backslash escapes whatever byte follows it. So a backslash at
// the end of s swallows the separator after it, and a backslash before a
// backslash, ',', ' ', '=' or '"' reads back differently or splits the
// line differently: such an s cannot be carried and the point is refused
// (connectors/influx/lpcheck fuzzes this against InfluxDB 1.8's parser).
func checkToken(s string) string {
	if !utf8.ValidString(s) {
		return fmt.Sprintf("%s is not valid UTF-8", streaming.QuoteKey(s))
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || r == utf8.RuneError {
			return fmt.Sprintf("%s holds the non-printable character %U", streaming.QuoteKey(s), r)
		}
	}
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && (i+1 == len(s) || strings.IndexByte(`\,= "`, s[i+1]) >= 0) {
			return fmt.Sprintf("%s has a backslash at its end or before one of \\ , = space \", which line protocol cannot carry", streaming.QuoteKey(s))
		}
	}
	return ""
}

// appendEscaped appends s with line-protocol escapes: a backslash before
// each byte of special. s has passed checkToken.
func appendEscaped(dst []byte, s, special string) []byte {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if strings.IndexByte(special, c) >= 0 {
			dst = append(dst, '\\')
		}
		dst = append(dst, c)
	}
	return dst
}
