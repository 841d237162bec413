package envconfig

import (
	"bytes"
	"encoding"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"
)

// Problem is one thing wrong in a config file: where (the key path, as
// dotted YAML keys with [i] for list items, and the line) and what.
type Problem struct {
	Path string
	Line int
	Env  string // the environment variable that set the value, when one did
	Msg  string
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	switch {
	case p.Env != "" && p.Path != "":
		fmt.Fprintf(&b, "environment %s (%s): ", p.Env, p.Path)
	case p.Env != "":
		fmt.Fprintf(&b, "environment %s: ", p.Env)
	case p.Path != "":
		b.WriteString(p.Path + ": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// Errors are every problem found in one config file, in file order.
type Errors struct {
	File     string // "" when decoding bytes
	Problems []Problem
}

func (e *Errors) Error() string {
	var b strings.Builder
	name := e.File
	if name == "" {
		name = "config"
	}
	if len(e.Problems) == 1 {
		if e.File == envFile {
			return e.Problems[0].String() // it names its variable: "environment TFLO_X: …"
		}
		fmt.Fprintf(&b, "%s: %s", name, e.Problems[0])
		return b.String()
	}
	fmt.Fprintf(&b, "%s: %d problems:", name, len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  " + p.String())
	}
	return b.String()
}

// Positioned is implemented by config types that want to know where in
// the file they were declared (a pipeline's graph nodes name their line
// in errors): Decode calls SetLine after decoding a mapping into one.
type Positioned interface {
	SetLine(line int)
}

// Extensible is implemented by config types that also take keys their
// fields do not name, each with a value of its own (a pipeline spec's
// sink of a type a program registered): the decoder gives such a key and
// its value to Extend instead of refusing it, and records the lines of
// everything under it. Extend returns false to have the key refused as
// unknown; Extensions then names the keys it would take, for the
// message.
type Extensible interface {
	Extend(key string, value *yaml.Node) bool
	Extensions() []string
}

// Decode decodes YAML data into dst (a pointer) strictly: a key the
// destination type does not have, a repeated key, or a value of the wrong
// type is a Problem naming the key path and the line, and every problem
// of the file is reported at once, as *Errors. Fields tagged yaml:"-"
// cannot be set from the file. Types implementing yaml.Unmarshaler decode
// themselves (DecodeNode keeps them strict), encoding.TextUnmarshaler
// types and time.Duration read a scalar's text.
func Decode(data []byte, dst any) error { return decode(data, dst, nil, nil) }

// decode is Decode recording each key path's line in lines (when not
// nil); origLines, when not nil, gives the file's line of each line of
// data (Expand's: a ${NAME} whose value holds newlines adds lines), so
// lines, problems and SetLine name the file's lines.
func decode(data []byte, dst any, lines map[string]int, origLines []int) error {
	orig := func(l int) int {
		if l >= 1 && l <= len(origLines) {
			return origLines[l-1]
		}
		return l
	}
	yamlErr := func(err error) error {
		p := yamlProblem("", err)
		p.Line = orig(p.Line)
		return &Errors{Problems: []Problem{p}}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var root, next yaml.Node
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) { // no document
			return nil
		}
		return yamlErr(err)
	}
	// One document: what a second one (after ---) sets would be ignored.
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return yamlErr(err)
	case len(next.Content) > 0 && next.Content[0].ShortTag() != "!!null": // a trailing --- is an empty one
		return &Errors{Problems: []Problem{{Line: orig(next.Content[0].Line), Msg: "a second YAML document (after ---): a file holds one"}}}
	}
	if origLines != nil {
		remapLines(&root, orig)
	}
	if root.Kind == 0 || len(root.Content) == 0 { // empty document
		return nil
	}
	return decodeNode(&root, dst, lines)
}

// DecodeNode is Decode of a parsed node: for yaml.Unmarshaler
// implementations that decode part of themselves strictly.
func DecodeNode(n *yaml.Node, dst any) error { return decodeNode(n, dst, nil) }

// decodeNode is DecodeNode recording each key path's line in lines (when
// not nil).
func decodeNode(n *yaml.Node, dst any, lines map[string]int) error {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return fmt.Errorf("envconfig: destination is %T, want a non-nil pointer", dst)
	}
	d := &decoder{lines: lines}
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) == 0 {
			return nil
		}
		n = n.Content[0]
	}
	d.value(n, v.Elem(), "")
	if len(d.problems) == 0 {
		return nil
	}
	return &Errors{Problems: d.problems}
}

type decoder struct {
	problems []Problem
	lines    map[string]int // key path → line of its value (nil: not recorded)
}

func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	d.problems = append(d.problems, Problem{Path: path, Line: n.Line, Msg: fmt.Sprintf(format, args...)})
}

var yamlUnmarshaler = reflect.TypeFor[yaml.Unmarshaler]()

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func (d *decoder) value(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if d.lines != nil && path != "" && (n.Kind != yaml.MappingNode || len(n.Content) == 0 || reflect.PointerTo(v.Type()).Implements(yamlUnmarshaler)) {
		// Values, lists, empty sections (kafka: {}) and mappings a type
		// decodes as one value: a section's own keys are recorded one by
		// one.
		d.lines[path] = n.Line
	}
	t := v.Type()
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return // null leaves the zero value (or the default applied later)
	}
	if reflect.PointerTo(t).Implements(yamlUnmarshaler) {
		if err := n.Decode(v.Addr().Interface()); err != nil {
			d.nested(n, path, err)
		}
		return
	}
	if reflect.PointerTo(t).Implements(textUnmarshaler) {
		if n.Kind != yaml.ScalarNode {
			d.fail(n, path, "want a value, got a %s", kindName(n))
			return
		}
		if err := v.Addr().Interface().(encoding.TextUnmarshaler).UnmarshalText([]byte(n.Value)); err != nil {
			d.fail(n, path, "%v", err)
		}
		return
	}
	if t == durationType {
		if n.Kind != yaml.ScalarNode {
			d.fail(n, path, "want a duration like 10s, got a %s", kindName(n))
			return
		}
		dur, err := time.ParseDuration(n.Value)
		if err != nil {
			d.fail(n, path, "%q is not a duration like 10s or 1m30s", n.Value)
			return
		}
		v.SetInt(int64(dur))
		return
	}
	switch t.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(t.Elem()))
		}
		d.value(n, v.Elem(), path)
	case reflect.Struct:
		d.structure(n, v, path)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.fail(n, path, "want a list, got a %s", kindName(n))
			return
		}
		s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, c := range n.Content {
			d.value(c, s.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
		v.Set(s)
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.fail(n, path, "want a mapping, got a %s", kindName(n))
			return
		}
		if t.Key().Kind() != reflect.String {
			d.fail(n, path, "envconfig: map keys of %s are not strings", t)
			return
		}
		m := reflect.MakeMapWithSize(t, len(n.Content)/2)
		d.pairs(n, path, func(k, val *yaml.Node, p string) {
			e := reflect.New(t.Elem()).Elem()
			d.value(val, e, p)
			m.SetMapIndex(reflect.ValueOf(k.Value).Convert(t.Key()), e)
		})
		v.Set(m)
	case reflect.Interface:
		var x any
		if err := n.Decode(&x); err != nil {
			d.nested(n, path, err)
			return
		}
		if x != nil {
			v.Set(reflect.ValueOf(x))
		}
	default:
		if n.Kind != yaml.ScalarNode {
			d.fail(n, path, "want %s, got a %s", kindWord(t), kindName(n))
			return
		}
		if isInteger(t) && !wholeNumber(n, t) {
			// yaml.v3 truncates a float into an integer (2.9 → 2), and
			// wraps one out of the type's range (-1.0 → 2⁶⁴-1 in a
			// uint64, -1e30 → -2⁶³ in an int64).
			d.fail(n, path, "%q is not %s", n.Value, kindWord(t))
			return
		}
		p := reflect.New(t)
		if err := n.Decode(p.Interface()); err != nil {
			d.fail(n, path, "%q is not %s", n.Value, kindWord(t))
			return
		}
		if t.Kind() == reflect.Float32 && math.IsInf(p.Elem().Float(), 0) && !isInfinity(n) {
			// yaml.v3 turns a number past float32's range into an
			// infinity (1e40 → +Inf).
			d.fail(n, path, "%q is out of the range of %s", n.Value, t)
			return
		}
		v.Set(p.Elem())
	}
}

// structure decodes a mapping into struct v: every key must be a field.
func (d *decoder) structure(n *yaml.Node, v reflect.Value, path string) {
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a mapping of keys, got a %s", kindName(n))
		return
	}
	fields := map[string]reflect.Value{}
	var names []string
	collectFields(v, fields, &names)
	ext, _ := v.Addr().Interface().(Extensible)
	d.pairs(n, path, func(k, val *yaml.Node, p string) {
		f, ok := fields[k.Value]
		if !ok {
			if ext != nil {
				if ext.Extend(k.Value, val) {
					d.record(val, p)
					return
				}
				names = append(slices.Clone(names), ext.Extensions()...)
			}
			d.fail(k, p, "unknown key (known here: %s)", strings.Join(names, ", "))
			return
		}
		if d.lines != nil && val.Kind == yaml.MappingNode && len(val.Content) > 0 {
			// A section is at its key's line (value records a
			// non-empty section's keys only): Line("graph") names the
			// line of "graph:", not of the first value under it.
			d.lines[p] = k.Line
		}
		d.value(val, f, p)
	})
	if pos, ok := v.Addr().Interface().(Positioned); ok {
		pos.SetLine(n.Line)
	}
}

// record records the line of every value under n (a value an Extensible
// took): a mapping's by their keys, a list's as one value and by [i].
func (d *decoder) record(n *yaml.Node, path string) {
	if d.lines == nil {
		return
	}
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	switch {
	case n.Kind == yaml.MappingNode && len(n.Content) > 0:
		for i := 0; i+1 < len(n.Content); i += 2 {
			d.record(n.Content[i+1], join(path, n.Content[i].Value))
		}
	case n.Kind == yaml.SequenceNode:
		d.lines[path] = n.Line // a list of strings prints as one value
		for i, c := range n.Content {
			d.record(c, fmt.Sprintf("%s[%d]", path, i))
		}
	default:
		d.lines[path] = n.Line
	}
}

// pairs calls fn for each key and value of the mapping n, with the
// key's path, refusing a repeated key.
func (d *decoder) pairs(n *yaml.Node, path string, fn func(k, val *yaml.Node, p string)) {
	seen := map[string]bool{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		p := join(path, k.Value)
		if seen[k.Value] {
			d.fail(k, p, "repeated key")
			continue
		}
		seen[k.Value] = true
		fn(k, val, p)
	}
}

// collectFields maps the YAML names of v's settable fields (inline
// structs flattened) to the fields.
func collectFields(v reflect.Value, into map[string]reflect.Value, names *[]string) {
	for sf, name := range yamlFields(v.Type()) {
		if name == "" {
			if sf.Type.Kind() == reflect.Struct { // an inline map holds what an Extensible took
				collectFields(v.FieldByIndex(sf.Index), into, names)
			}
			continue
		}
		into[name] = v.FieldByIndex(sf.Index)
		*names = append(*names, name)
	}
}

// nested records the error of a type that decoded itself: its own
// *Errors keep their paths (made relative to path), anything else is one
// problem at n.
func (d *decoder) nested(n *yaml.Node, path string, err error) {
	var es *Errors
	if errors.As(err, &es) {
		for _, p := range es.Problems {
			p.Path = joinPath(path, p.Path)
			d.problems = append(d.problems, p)
		}
		return
	}
	d.problems = append(d.problems, yamlProblem(path, err))
	if d.problems[len(d.problems)-1].Line == 0 {
		d.problems[len(d.problems)-1].Line = n.Line
	}
}

func joinPath(path, rel string) string {
	switch {
	case path == "":
		return rel
	case rel == "":
		return path
	case strings.HasPrefix(rel, "["):
		return path + rel
	}
	return path + "." + rel
}

var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)

// yamlProblem turns a yaml.v3 error into a Problem, taking the line out
// of its text.
func yamlProblem(path string, err error) Problem {
	msg := err.Error()
	var te *yaml.TypeError
	if errors.As(err, &te) && len(te.Errors) > 0 {
		msg = te.Errors[0]
	}
	p := Problem{Path: path}
	if m := yamlLine.FindStringSubmatch(msg); m != nil {
		p.Line, _ = strconv.Atoi(m[1])
		msg = msg[len(m[0]):]
	}
	p.Msg = strings.TrimPrefix(msg, "yaml: ")
	return p
}

// isInteger reports whether t is an integer kind.
func isInteger(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return true
	}
	return false
}

// wholeNumber reports whether the scalar n is not a float, or a float
// without a fraction (1e3) in the range of the integer type t.
func wholeNumber(n *yaml.Node, t reflect.Type) bool {
	if n.ShortTag() != "!!float" {
		return true
	}
	var f float64
	if n.Decode(&f) != nil || math.IsInf(f, 0) || f != math.Trunc(f) {
		return false
	}
	// Powers of two are exact as floats: the bounds are 2^(bits-1) for
	// a signed type, 2^bits for an unsigned one, both excluded.
	if t.Kind() >= reflect.Uint && t.Kind() <= reflect.Uint64 {
		return f >= 0 && f < math.Ldexp(1, t.Bits())
	}
	return f >= -math.Ldexp(1, t.Bits()-1) && f < math.Ldexp(1, t.Bits()-1)
}

// isInfinity reports whether the scalar n is an infinity (.inf, -.inf).
func isInfinity(n *yaml.Node) bool {
	var f float64
	return n.Decode(&f) == nil && math.IsInf(f, 0)
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	case yaml.ScalarNode:
		return fmt.Sprintf("value %q", n.Value)
	}
	return "node"
}

func kindWord(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "an integer"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a non-negative integer of " + strconv.Itoa(t.Bits()) + " bits"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	}
	return "a " + t.String()
}

// refPattern matches ${NAME} and ${NAME:-default}.
var refPattern = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}`)

// Expand replaces ${NAME} in data with the variable's value from lookup,
// and ${NAME:-default} with the value or, when the variable is unset or
// empty, the default. A bare $NAME is left as it is, and so are comments:
// comment lines and a line's trailing comment (a # after a space, outside
// quotes), but not a # inside a block scalar (| or >), which is text. A
// ${NAME} whose variable is unset is a Problem naming its line.
func Expand(data []byte, lookup func(string) (string, bool)) ([]byte, error) {
	b, _, err := expand(data, lookup)
	if err != nil {
		return nil, err
	}
	return b, nil
}

// remapLines sets the line of n and of every node under it to orig of
// it.
func remapLines(n *yaml.Node, orig func(int) int) {
	n.Line = orig(n.Line)
	for _, c := range n.Content {
		remapLines(c, orig)
	}
}

// expand is Expand that also returns the line of data each line of the
// result comes from (1-based): a value holding newlines adds lines. With
// unset variables it returns their problems (*Errors) and the text too,
// each unset ${NAME} replaced by nothing, so that the file's other
// problems are found as well.
func expand(data []byte, lookup func(string) (string, bool)) ([]byte, []int, error) {
	var problems []Problem
	expand := func(i int, l []byte) []byte {
		return refPattern.ReplaceAllFunc(l, func(ref []byte) []byte {
			m := refPattern.FindSubmatch(ref)
			v, ok := lookup(string(m[1]))
			switch {
			case ok && v != "":
				return []byte(v)
			case bytes.Contains(ref, []byte(":-")):
				return m[2]
			case ok:
				return nil
			}
			problems = append(problems, Problem{Line: i + 1,
				Msg: fmt.Sprintf("${%s}: the variable is not set (write ${%s:-default} for a default)", m[1], m[1])})
			return nil // as if empty: the text is still read for its other problems
		})
	}
	lines := bytes.Split(data, []byte("\n"))
	block := -1 // indentation of the node whose block scalar the lines are in; -1: none
	for i, l := range lines {
		indent := nodeIndent(l)
		if block >= 0 {
			if len(bytes.TrimSpace(l)) == 0 || indent > block {
				lines[i] = expand(i, l) // block scalar text: a # is no comment
				continue
			}
			block = -1
		}
		if bytes.HasPrefix(bytes.TrimSpace(l), []byte("#")) {
			continue
		}
		code, comment := splitComment(l)
		lines[i] = append(expand(i, code), comment...)
		if blockHeader.Match(code) {
			block = indent
			if rest := bytes.TrimLeft(code, " -"); len(rest) > 0 && (rest[0] == '|' || rest[0] == '>') {
				// "- |": the list item is the block scalar, whose text
				// need only be indented past the item's dash.
				block = bytes.LastIndexByte(code[:len(code)-len(rest)], '-')
			}
		}
	}
	var orig []int
	for i, l := range lines {
		for range bytes.Count(l, []byte("\n")) + 1 {
			orig = append(orig, i+1)
		}
	}
	if len(problems) > 0 {
		return bytes.Join(lines, []byte("\n")), orig, &Errors{Problems: problems}
	}
	return bytes.Join(lines, []byte("\n")), orig, nil
}

// blockHeader matches a line whose value starts a block scalar (| or >,
// with chomping and indentation indicators).
var blockHeader = regexp.MustCompile(`(?:^|[:-])\s*[|>][-+0-9]*\s*$`)

// nodeIndent is the indentation of the node a line starts: its leading
// spaces, and two more for each "- " of a list item it opens.
func nodeIndent(l []byte) int {
	n := len(l) - len(bytes.TrimLeft(l, " "))
	for rest := l[n:]; bytes.HasPrefix(rest, []byte("- ")); {
		sp := len(rest) - 1 - len(bytes.TrimLeft(rest[1:], " "))
		n, rest = n+1+sp, rest[1+sp:]
	}
	return n
}

// splitComment splits l before its trailing comment: a # at the start
// or after a space or tab, outside quotes. A quote inside a plain value
// (it's) hides a comment after it, which is then expanded as before.
func splitComment(l []byte) (code, comment []byte) {
	var quote byte
	for i := 0; i < len(l); i++ {
		switch c := l[i]; {
		case quote == '"' && c == '\\':
			i++ // an escaped character
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'':
			quote = c
		case c == '#' && (i == 0 || l[i-1] == ' ' || l[i-1] == '\t'):
			return l[:i:i], l[i:]
		}
	}
	return l, nil
}

// Defaulter is implemented by configs whose defaults depend on other
// fields: Load calls ApplyDefaults after the file and the environment
// were read, so a default never hides what the file said (a default DLQ
// topic derived from a topic the file sets).
type Defaulter interface {
	ApplyDefaults()
}

// Validator is implemented by configs that check themselves; Load calls
// Validate after ApplyDefaults.
type Validator interface {
	Validate() error
}

// readFile reads path and expands its ${...} references; lines gives
// the file's line of each line of b (expand's).
func readFile(path string) (b []byte, lines []int, err error) {
	b, err = os.ReadFile(path)
	if err != nil {
		// "file x.yaml: no such file or directory", not the PathError's
		// "open x.yaml: …" after the path again. "file", not "config
		// file": a pipeline spec is read here too.
		var pe *fs.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return nil, nil, &FileError{Path: path, Err: err}
	}
	b, lines, err = expand(b, os.LookupEnv)
	if err != nil {
		return b, lines, withFile(err, path) // the unset variables; the text is still read
	}
	return b, lines, nil
}

// FileError is a config file or spec that could not be read: "file
// x.yaml: no such file or directory". A command whose flag named the
// file sets Flag (FromFlag), and the error names the flag instead, as
// starter's file flags do: `--pipeline "x.yaml": no such file or
// directory`.
type FileError struct {
	Path string
	Flag string // "--pipeline"; "" when no flag named it
	Err  error  // the reason, without the PathError's "open x.yaml"
}

func (e *FileError) Error() string {
	if e.Flag != "" {
		return fmt.Sprintf("%s %q: %v", e.Flag, e.Path, e.Err)
	}
	return fmt.Sprintf("file %s: %v", e.Path, e.Err)
}

func (e *FileError) Unwrap() error { return e.Err }

// FromFlag names flag (say "--config") as what named the file of err's
// FileError, if err holds one, and returns err.
func FromFlag(err error, flag string) error {
	var fe *FileError
	if errors.As(err, &fe) {
		fe.Flag = flag
	}
	return err
}

func withFile(err error, path string) error {
	var es *Errors
	if errors.As(err, &es) {
		es.File = path
		return es
	}
	return fmt.Errorf("config %s: %w", path, err)
}
