package main

import (
	"bytes"
	"encoding"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"gopkg.in/yaml.v3"
)

// Output formats of -o. Every command prints through app.emit or
// app.emitTable, so each honours all three.
const (
	formatTable = "table"
	formatJSON  = "json"
	formatYAML  = "yaml"
)

// outputFormat is the -o flag's value; Set refuses anything else, so a bad
// -o is a usage error before the command runs.
type outputFormat string

func (f *outputFormat) String() string { return string(*f) }
func (f *outputFormat) Type() string   { return "table|json|yaml" }
func (f *outputFormat) Set(s string) error {
	switch s {
	case formatTable, formatJSON, formatYAML:
		*f = outputFormat(s)
		return nil
	}
	return fmt.Errorf("%q is not one of table, json, yaml", s)
}

// structured reports whether the output is for programs (-o json|yaml).
func (a *app) structured() bool { return a.format != formatTable }

// emit prints v: under -o json or yaml as a document (see plain for how
// durations, times and empty lists print), under -o table by calling
// human, which writes text for people (nil: print nothing).
func (a *app) emit(v any, human func(w io.Writer)) error {
	switch a.format {
	case formatJSON:
		enc := json.NewEncoder(a.out)
		enc.SetIndent("", "  ")
		return enc.Encode(plain(reflect.ValueOf(v)))
	case formatYAML:
		enc := yaml.NewEncoder(a.out)
		enc.SetIndent(2)
		if err := enc.Encode(plain(reflect.ValueOf(v))); err != nil {
			return err
		}
		return enc.Close()
	}
	if human != nil {
		human(a.out)
	}
	return nil
}

// emitTable prints v under -o json|yaml and t under -o table. A table
// without rows prints its header, and t.empty (if any) goes to stderr as
// a hint; the exit code stays 0, as kubectl's does.
func (a *app) emitTable(v any, t *table) error {
	return a.emit(v, func(w io.Writer) {
		t.write(w)
		if len(t.rows) == 0 && t.empty != "" {
			fmt.Fprintln(a.errOut, t.empty)
		}
	})
}

// table is what a listing shows under -o table: a header and rows whose
// cells format the same way in every command (see cell).
type table struct {
	header []string
	rows   [][]string
	// empty is the hint printed to stderr when there are no rows.
	empty string
}

func newTable(header ...string) *table { return &table{header: header} }

// add appends a row; each value goes through cell.
func (t *table) add(cells ...any) {
	row := make([]string, len(cells))
	for i, c := range cells {
		row[i] = cell(c)
	}
	t.rows = append(t.rows, row)
}

func (t *table) write(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(t.header, "\t"))
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	tw.Flush()
}

// age is a time shown in a table as how long ago it was ("12s ago").
type age time.Time

// cell formats one table value: "-" for nothing (nil, "", a zero time),
// durations short ("850ms", "1.2s", "3m4s"), times in RFC 3339 local time,
// ages as "12s ago".
func cell(v any) string {
	switch x := v.(type) {
	case nil:
		return "-"
	case string:
		if x == "" {
			return "-"
		}
		return x
	case time.Duration:
		return shortDuration(x)
	case time.Time:
		if x.IsZero() {
			return "-"
		}
		return x.Local().Format(time.RFC3339)
	case age:
		t := time.Time(x)
		if t.IsZero() {
			return "-"
		}
		return shortDuration(time.Since(t)) + " ago"
	case fmt.Stringer:
		return cell(x.String())
	}
	return fmt.Sprint(v)
}

// shortDuration rounds d for people: ms below a second, a tenth of a
// second below a minute, seconds above.
func shortDuration(d time.Duration) string {
	switch a := d.Abs(); {
	case a < time.Millisecond:
		return d.String()
	case a < time.Second:
		return d.Round(time.Millisecond).String()
	case a < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// executionStatus is a workflow execution status in the one casing the
// CLI prints statuses in: lower case, words joined by "_" ("running",
// "timed_out", "continued_as_new").
func executionStatus(s enumspb.WorkflowExecutionStatus) string {
	name, ok := enumspb.WorkflowExecutionStatus_name[int32(s)]
	if !ok {
		return fmt.Sprint(int32(s))
	}
	return strings.ToLower(strings.TrimPrefix(name, "WORKFLOW_EXECUTION_STATUS_"))
}

var (
	durationType      = reflect.TypeFor[time.Duration]()
	timeType          = reflect.TypeFor[time.Time]()
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// plain turns v into the value -o json and -o yaml print, by the rules of
// encoding/json (field names and omitempty/omitzero from json tags,
// embedded structs inlined, Marshalers honoured) with three differences
// that hold for every command by construction:
//   - a time.Duration prints as a string ("1.2s"), not nanoseconds;
//   - a zero time.Time is left out of its object (null elsewhere); other
//     times print in RFC 3339, UTC;
//   - a nil slice prints as [] (an empty listing), not null;
//   - a float prints as encoding/json prints it, under yaml too
//     (16777216, not 1.6777216e+07).
//
// Struct fields keep their order.
func plain(v reflect.Value) any {
	if !v.IsValid() {
		return nil
	}
	t := v.Type()
	switch t {
	case durationType:
		return time.Duration(v.Int()).String()
	case timeType:
		tm := v.Interface().(time.Time)
		if tm.IsZero() {
			return nil
		}
		return tm.UTC().Format(time.RFC3339Nano)
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
	}
	if t.Implements(jsonMarshalerType) && t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface {
		b, err := v.Interface().(json.Marshaler).MarshalJSON()
		if err != nil {
			return fmt.Sprintf("<%v>", err)
		}
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.UseNumber()
		var out any
		if dec.Decode(&out) != nil {
			return string(b)
		}
		return out
	}
	if t.Implements(textMarshalerType) && t.Kind() != reflect.Pointer && t.Kind() != reflect.Interface {
		b, err := v.Interface().(encoding.TextMarshaler).MarshalText()
		if err != nil {
			return fmt.Sprintf("<%v>", err)
		}
		return string(b)
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Interface:
		return plain(v.Elem())
	case reflect.Struct:
		o := object{}
		structFields(v, &o)
		return o
	case reflect.Map:
		keys := v.MapKeys()
		o := make(object, 0, len(keys))
		for _, k := range keys {
			o = append(o, field{mapKey(k), plain(v.MapIndex(k))})
		}
		sort.Slice(o, func(i, j int) bool { return o[i].key < o[j].key })
		return o
	case reflect.Slice, reflect.Array:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			if v.IsNil() {
				return nil
			}
			b, _ := json.Marshal(v.Bytes()) // base64, as encoding/json prints bytes
			return json.RawMessage(b)
		}
		out := make([]any, v.Len())
		for i := range out {
			out[i] = plain(v.Index(i))
		}
		return out
	case reflect.Bool:
		return v.Bool()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return v.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return v.Uint()
	case reflect.Float32, reflect.Float64:
		f := v.Float()
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return fmt.Sprint(f) // JSON has no NaN
		}
		return number(f)
	case reflect.String:
		return v.String()
	}
	return fmt.Sprint(v.Interface())
}

// structFields appends v's fields to o as encoding/json would name them.
func structFields(v reflect.Value, o *object) {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		fv := v.Field(i)
		if sf.Anonymous && name == "" {
			ft := sf.Type
			if ft.Kind() == reflect.Pointer {
				if fv.IsNil() {
					continue
				}
				fv, ft = fv.Elem(), ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				structFields(fv, o)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if hasOpt(opts, "omitempty") && isEmpty(fv) || hasOpt(opts, "omitzero") && fv.IsZero() {
			continue
		}
		if fv.Type() == timeType && fv.Interface().(time.Time).IsZero() {
			continue // never 0001-01-01
		}
		*o = append(*o, field{name, plain(fv)})
	}
}

func hasOpt(opts, want string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// isEmpty is encoding/json's omitempty test.
func isEmpty(v reflect.Value) bool {
	switch v.Kind() {
	case reflect.Array, reflect.Map, reflect.Slice, reflect.String:
		return v.Len() == 0
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Interface, reflect.Pointer:
		return v.IsZero()
	}
	return false
}

func mapKey(k reflect.Value) string {
	if k.Type().Implements(textMarshalerType) {
		if b, err := k.Interface().(encoding.TextMarshaler).MarshalText(); err == nil {
			return string(b)
		}
	}
	if k.Kind() == reflect.String {
		return k.String()
	}
	return fmt.Sprint(k.Interface())
}

// number is a float as plain returns it: encoding/json prints it as a
// float64, and MarshalYAML prints it the same way, where yaml.v3 would
// use %g (1.6777216e+07 for 16777216).
type number float64

func (n number) MarshalYAML() (any, error) {
	f := float64(n)
	// encoding/json's choice: plain digits, exponent only for very large
	// or very small magnitudes.
	format := byte('f')
	if a := math.Abs(f); a != 0 && (a < 1e-6 || a >= 1e21) {
		format = 'e'
	}
	// No tag: a whole number reads back as an int, as 1.0 always did
	// under yaml.v3 ("1") and does under json.
	return &yaml.Node{Kind: yaml.ScalarNode, Value: strconv.FormatFloat(f, format, -1, 64)}, nil
}

// object is a JSON/YAML object whose keys keep their order.
type object []field

type field struct {
	key string
	val any
}

func (o object) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, err := json.Marshal(f.key)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(f.val)
		if err != nil {
			return nil, err
		}
		b.Write(k)
		b.WriteByte(':')
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func (o object) MarshalYAML() (any, error) {
	n := &yaml.Node{Kind: yaml.MappingNode}
	for _, f := range o {
		var v yaml.Node
		val := f.val
		if raw, ok := val.(json.RawMessage); ok {
			var s string
			if json.Unmarshal(raw, &s) == nil {
				val = s
			}
		}
		if err := v.Encode(val); err != nil {
			return nil, err
		}
		n.Content = append(n.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: f.key}, &v)
	}
	return n, nil
}
