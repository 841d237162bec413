package envconfig

import (
	"encoding"
	"errors"
	"fmt"
	"iter"
	"os"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// envFile is the File of the environment's Errors.
const envFile = "environment"

// Prefix is the prefix of every tflo worker's variables.
const Prefix = "TFLO"

// Key is one configurable leaf field.
type Key struct {
	Env  string // TFLO_KAFKA_BROKERS
	Path string // kafka.brokers
	Type string // Go type, e.g. []string
	// Field is the Go field the key sets, "<package path>.<type>.<field>":
	// where its documentation is.
	Field string
}

// Name returns the variable of a YAML key path under prefix: the naming
// rule of the package doc.
func Name(prefix string, path ...string) string {
	var b strings.Builder
	b.WriteString(prefix)
	for _, p := range path {
		b.WriteByte('_')
		for _, r := range p {
			switch {
			case r >= 'a' && r <= 'z':
				b.WriteRune(r - 'a' + 'A')
			case r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
				b.WriteRune(r)
			default:
				b.WriteByte('_')
			}
		}
	}
	return b.String()
}

// Load fills dst (a pointer to a struct) from the YAML file at path (no
// file when path is empty), then from the environment under prefix, then
// calls dst's ApplyDefaults and Validate when it has them (Defaulter,
// Validator): defaults come after everything that was set, never before.
//
// The file is read strictly (Decode): an unknown key, a repeated key or a
// value of the wrong type is an error naming the key path and the line,
// and every problem of the file is reported at once. ${NAME} and
// ${NAME:-default} in the file are replaced by environment variables
// first (Expand).
func Load(path, prefix string, dst any) error {
	_, err := LoadOrigins(path, prefix, dst)
	return err
}

// Origins say where each value of a loaded config came from, by key path
// (kafka.topic, sinks[0].influx.url): "FILE:LINE" for the file, "env
// NAME" for a variable. A path absent from it has its default.
type Origins map[string]string

// Of returns the origin of the value at path: its own, else that of the
// list item it is part of when the item was written as one value (an
// input "value" of graph.inputs, decoded by its type), else "default".
func (o Origins) Of(path string) string {
	if s, ok := o[path]; ok {
		return s
	}
	for p := path; ; {
		i := strings.LastIndexAny(p, ".[")
		if i <= 0 {
			return "default"
		}
		p = p[:i]
		if !strings.HasSuffix(p, "]") {
			continue
		}
		if s, ok := o[p]; ok {
			return s
		}
		return "default"
	}
}

// Line returns the line of the file that set the value at path (Of's
// rule): for a section (state.durable), the line of its key; for a list
// item written as a mapping (sinks[1]), the first line of a value in it;
// 0 when the file set none (a variable or the default).
func (o Origins) Line(path string) int {
	if l := fileLine(o.Of(path)); l > 0 {
		return l
	}
	first := 0
	for p, s := range o {
		if rest, ok := strings.CutPrefix(p, path); ok && rest != "" && (rest[0] == '.' || rest[0] == '[') {
			if l := fileLine(s); l > 0 && (first == 0 || l < first) {
				first = l
			}
		}
	}
	return first
}

// Env returns the variable that set the value at path (Of's rule), ""
// when the file or the default did: a problem of that value is the
// variable's to name ("environment TFLO_GRAPH_OUTPUTS: ...").
func (o Origins) Env(path string) string {
	name, _ := strings.CutPrefix(o.Of(path), "env ")
	if name == o.Of(path) {
		return ""
	}
	return name
}

// fileLine is the line of an origin in a file ("FILE:LINE"), else 0.
func fileLine(origin string) int {
	i := strings.LastIndexByte(origin, ':')
	if i < 0 || strings.HasPrefix(origin, "env ") {
		return 0
	}
	l, err := strconv.Atoi(origin[i+1:])
	if err != nil {
		return 0
	}
	return l
}

// addFile records lines (key path → line) as origins in file.
func (o Origins) addFile(file string, lines map[string]int) {
	for p, l := range lines {
		o[p] = fmt.Sprintf("%s:%d", file, l)
	}
}

// DecodeOrigins is Decode that also returns each value's origin, as a
// line of file (what the bytes are called).
func DecodeOrigins(data []byte, file string, dst any) (Origins, error) {
	lines := map[string]int{}
	err := decode(data, dst, lines, nil)
	origins := Origins{}
	origins.addFile(file, lines)
	return origins, err
}

// ExpandOrigins is DecodeOrigins of data with its ${NAME} references
// replaced by lookup's variables (Expand): the problems and origins name
// the lines of data, not of the expanded text (a value holding newlines
// adds lines), as Load's do.
func ExpandOrigins(data []byte, file string, lookup func(string) (string, bool), dst any) (Origins, error) {
	b, dataLines, err := expand(data, lookup)
	var unset *Errors
	if err != nil && !errors.As(err, &unset) {
		return nil, err
	}
	lines := map[string]int{}
	err = decode(b, dst, lines, dataLines)
	if unset != nil {
		// The unset variables and the text's other problems, at once.
		var es *Errors
		if errors.As(err, &es) {
			unset.Problems = append(unset.Problems, es.Problems...)
		}
		return nil, unset
	}
	origins := Origins{}
	origins.addFile(file, lines)
	return origins, err
}

// LoadOrigins is Load that also returns each value's origin (what
// `worker --print-config` shows).
func LoadOrigins(path, prefix string, dst any) (Origins, error) {
	origins := Origins{}
	all := &Errors{File: path}
	if path != "" {
		b, fileLines, err := readFile(path)
		var unset *Errors
		if err != nil && (b == nil || !errors.As(err, &unset)) {
			return nil, err
		}
		if unset != nil {
			// An unset ${NAME} is one of the file's problems: the rest
			// of the file and the environment are still read.
			all.Problems = append(all.Problems, unset.Problems...)
		}
		lines := map[string]int{}
		err = decode(b, dst, lines, fileLines)
		origins.addFile(path, lines)
		if err != nil {
			var es *Errors
			if !errors.As(err, &es) {
				return nil, withFile(err, path)
			}
			all.Problems = append(all.Problems, es.Problems...)
		}
	}
	if err := apply(prefix, dst, os.LookupEnv, origins); err != nil {
		var es *Errors
		if !errors.As(err, &es) {
			return nil, err
		}
		all.Problems = append(all.Problems, es.Problems...)
	}
	if len(all.Problems) > 0 {
		return nil, all // the file's and the environment's problems, all at once
	}
	if d, ok := dst.(Defaulter); ok {
		d.ApplyDefaults()
	}
	if v, ok := dst.(Validator); ok {
		return origins, v.Validate()
	}
	return origins, nil
}

// Apply sets the fields of dst whose variable lookup finds. A variable
// set to the empty string clears its key (the zero value, as if the file
// had not set it), so the key's default applies. Every bad value is
// reported at once, as *Errors whose problems name the variable and the
// key path.
func Apply(prefix string, dst any, lookup func(string) (string, bool)) error {
	return apply(prefix, dst, lookup, nil)
}

// apply is Apply recording the variables it used in origins (when not
// nil).
func apply(prefix string, dst any, lookup func(string) (string, bool), origins Origins) error {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("envconfig: destination is %T, want a pointer to a struct", dst)
	}
	var problems []Problem
	err := walk(v.Elem(), nil, func(f reflect.Value, path []string, _ string) error {
		name := Name(prefix, path...)
		s, ok := lookup(name)
		if !ok {
			return errNotSet
		}
		if origins != nil {
			origins[strings.Join(path, ".")] = "env " + name
		}
		if s == "" {
			f.SetZero()
			return errCleared
		}
		if err := set(f, s); err != nil {
			problems = append(problems, Problem{Path: strings.Join(path, "."), Env: name, Msg: fmt.Sprintf("%q: %v", s, err)})
		}
		return nil
	}, true)
	if err != nil {
		return err
	}
	if len(problems) > 0 {
		return &Errors{Problems: problems}
	}
	return nil
}

// Unknown reports every variable of environ ("NAME=value" entries, as
// os.Environ gives) under prefix that is none of keys' variables, as
// *Errors naming the variable and, when one is close, the key it likely
// meant. allowed are more names that are not keys but are read under the
// prefix (TFLO_S3_ENDPOINT); one ending in "_" allows every name it
// begins (another binary's prefix).
func Unknown(prefix string, environ []string, keys []Key, allowed ...string) error {
	known := map[string]bool{}
	for _, k := range keys {
		known[k.Env] = true
	}
	var problems []Problem
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, prefix+"_") || known[name] || isAllowed(name, allowed) {
			continue
		}
		msg := "matches no configuration key"
		if near := closest(name, keys); near != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", near)
		}
		problems = append(problems, Problem{Env: name, Msg: msg})
	}
	if len(problems) == 0 {
		return nil
	}
	slices.SortFunc(problems, func(a, b Problem) int { return strings.Compare(a.Env, b.Env) })
	return &Errors{File: envFile, Problems: problems}
}

// Named returns the variables the *_env keys of cfg (a loaded config)
// name: the variables holding its secrets, which are no keys, and which
// Unknown must be allowed when they are under the prefix.
func Named(cfg any) []string {
	var out []string
	for _, s := range Settings(cfg) {
		last := s.Path[strings.LastIndexAny(s.Path, ".]")+1:]
		if !strings.HasSuffix(last, "_env") {
			continue
		}
		if v, err := strconv.Unquote(s.Value); err == nil && v != "" {
			out = append(out, v)
		}
	}
	return out
}

func isAllowed(name string, allowed []string) bool {
	for _, a := range allowed {
		if name == a || strings.HasSuffix(a, "_") && strings.HasPrefix(name, a) {
			return true
		}
	}
	return false
}

// closest returns the key variable nearest to name by edit distance, if
// it is close enough to be a typo (at most a third of the name).
func closest(name string, keys []Key) string {
	best, bestD := "", len(name)/3+1
	for _, k := range keys {
		if d := editDistance(name, k.Env); d < bestD {
			best, bestD = k.Env, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// Keys lists the variables of every leaf field of the struct type of
// zero (a struct or a pointer to one), in field order.
func Keys(prefix string, zero any) ([]Key, error) {
	v := reflect.New(reflect.TypeOf(zero)).Elem()
	for v.Kind() == reflect.Pointer {
		v = reflect.New(v.Type().Elem()).Elem()
	}
	if v.Kind() != reflect.Struct {
		return nil, fmt.Errorf("envconfig: %T is not a struct", zero)
	}
	var out []Key
	err := walk(v, nil, func(f reflect.Value, path []string, field string) error {
		out = append(out, Key{Env: Name(prefix, path...), Path: strings.Join(path, "."), Type: f.Type().String(), Field: field})
		return nil
	}, false)
	return out, err
}

// AllKeys returns the keys of Keys and, each in its place in the order
// of zero's fields (the order a help lists them in), the keys no variable
// sets, set in the file only: lists of sections (a spec's sinks and
// graph.nodes) and sections that read themselves from YAML with no key
// of their own (a spec's decoder). A file-only key's Env is empty.
func AllKeys(prefix string, zero any) ([]Key, error) {
	t := reflect.TypeOf(zero)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("envconfig: %T is not a struct", zero)
	}
	var out []Key
	var visit func(t reflect.Type, path []string)
	visit = func(t reflect.Type, path []string) {
		for sf, name := range yamlFields(t) {
			p := append(append([]string(nil), path...), name)
			if name == "" { // inline
				p = path
			}
			ft := sf.Type
			if ft.Kind() == reflect.Pointer && !leaf(ft) {
				ft = ft.Elem()
			}
			switch {
			case leaf(ft): // as Keys names it (walk)
				out = append(out, Key{Env: Name(prefix, p...), Path: strings.Join(p, "."), Type: ft.String(), Field: fieldName(t, sf)})
			case ft.Kind() == reflect.Struct:
				if keys, _ := Keys("", reflect.Zero(ft).Interface()); len(keys) > 0 || !reflect.PointerTo(ft).Implements(yamlUnmarshaler) {
					visit(ft, p)
					continue
				}
				fallthrough
			default:
				if name != "" {
					out = append(out, Key{Path: strings.Join(p, "."), Type: sf.Type.String(), Field: fieldName(t, sf)})
				}
			}
		}
	}
	visit(t, nil)
	return out, nil
}

var (
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
	durationType    = reflect.TypeFor[time.Duration]()
)

// leaf reports whether t is set from one string.
func leaf(t reflect.Type) bool {
	if reflect.PointerTo(t).Implements(textUnmarshaler) || t == durationType {
		return true
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return true
	case reflect.Slice:
		return t.Elem().Kind() == reflect.String
	}
	return false
}

// errNotSet is what walk's fn returns for a leaf it left alone: a nil
// pointer above it (a section, or a *bool) stays nil.
var errNotSet = errors.New("envconfig: not set")

// errCleared is what walk's fn returns for a leaf it cleared (a variable
// set to ""): a pointer leaf becomes nil, so its default applies (a *bool
// whose default is true stayed false), and it allocates no section.
var errCleared = errors.New("envconfig: cleared")

// walk calls fn for every leaf field of the struct v with its YAML path.
// With alloc, nil struct pointers are allocated only when a leaf below
// them is set, to any value, zero too (fn reports it by a lookup hit), so
// absent sections stay nil; a pointer to a leaf (*bool: unset means the
// default) likewise. fn returns errNotSet for a leaf it left alone,
// errCleared for one it cleared.
func walk(v reflect.Value, path []string, fn func(f reflect.Value, path []string, field string) error, alloc bool) error {
	t := v.Type()
	for sf, name := range yamlFields(t) {
		p := append(append([]string(nil), path...), name)
		if name == "" { // inline
			p = path
		}
		f := v.FieldByIndex(sf.Index)
		ft := sf.Type
		switch {
		case leaf(ft):
			if err := fn(f, p, fieldName(t, sf)); err != nil && err != errNotSet && err != errCleared {
				return err
			}
		case ft.Kind() == reflect.Pointer && leaf(ft.Elem()):
			tmp := reflect.New(ft.Elem())
			if !f.IsNil() {
				tmp.Elem().Set(f.Elem())
			}
			switch err := fn(tmp.Elem(), p, fieldName(t, sf)); {
			case err == errNotSet:
			case err == errCleared:
				f.SetZero()
			case err != nil:
				return err
			case alloc:
				f.Set(tmp)
			}
		case ft.Kind() == reflect.Struct:
			if err := walk(f, p, fn, alloc); err != nil {
				return err
			}
		case ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.Struct && !leaf(ft.Elem()):
			tmp := reflect.New(ft.Elem())
			if !f.IsNil() {
				tmp = f
			}
			hit := false
			err := walk(tmp.Elem(), p, func(lf reflect.Value, lp []string, field string) error {
				err := fn(lf, lp, field)
				if err == nil {
					hit = true
				}
				return err
			}, alloc)
			if err != nil {
				return err
			}
			// Any value, zero too: TFLO_X_Y=0 for a section the file
			// has not is a setting, not to be dropped.
			if alloc && f.IsNil() && hit {
				f.Set(tmp)
			}
		default:
			// No text form (lists of sections, maps, interfaces): set in
			// the file only.
		}
	}
	return nil
}

// fieldName is "<package path>.<type>.<field>" ("" in an anonymous
// struct).
func fieldName(t reflect.Type, sf reflect.StructField) string {
	if t.Name() == "" {
		return ""
	}
	return t.PkgPath() + "." + t.Name() + "." + sf.Name
}

// yamlFields yields the fields of struct type t that YAML keys set, with
// their key ("" for an inline struct): exported, not tagged yaml:"-".
func yamlFields(t reflect.Type) iter.Seq2[reflect.StructField, string] {
	return func(yield func(reflect.StructField, string) bool) {
		for i := range t.NumField() {
			sf := t.Field(i)
			if !sf.IsExported() {
				continue
			}
			name, inline := yamlName(sf)
			if name == "-" {
				continue
			}
			if inline {
				name = ""
			}
			if !yield(sf, name) {
				return
			}
		}
	}
}

func yamlName(sf reflect.StructField) (name string, inline bool) {
	tag := sf.Tag.Get("yaml")
	parts := strings.Split(tag, ",")
	for _, o := range parts[1:] {
		if o == "inline" {
			return "", true
		}
	}
	if parts[0] != "" {
		return parts[0], false
	}
	return strings.ToLower(sf.Name), false
}

func set(f reflect.Value, s string) error {
	if f.CanAddr() {
		if u, ok := f.Addr().Interface().(encoding.TextUnmarshaler); ok {
			return u.UnmarshalText([]byte(s))
		}
	}
	// A value that does not parse is worded as a file's (decode.go), not
	// as strconv's or time's ("strconv.ParseInt: parsing ...").
	if f.Type() == durationType {
		d, err := time.ParseDuration(s)
		if err != nil {
			return errors.New("not a duration like 10s or 1m30s")
		}
		f.SetInt(int64(d))
		return nil
	}
	switch f.Kind() {
	case reflect.String:
		f.SetString(s)
	case reflect.Bool:
		b, err := parseBool(s)
		if err != nil {
			return err
		}
		f.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, f.Type().Bits())
		if err != nil {
			return errors.New("not " + kindWord(f.Type()))
		}
		f.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(s, 10, f.Type().Bits())
		if err != nil {
			return errors.New("not " + kindWord(f.Type()))
		}
		f.SetUint(n)
	case reflect.Float32, reflect.Float64:
		n, err := strconv.ParseFloat(s, f.Type().Bits())
		if errors.Is(err, strconv.ErrRange) {
			return fmt.Errorf("out of the range of %s", f.Type())
		}
		if err != nil {
			return errors.New("not " + kindWord(f.Type()))
		}
		f.SetFloat(n)
	case reflect.Slice:
		items := reflect.Zero(f.Type())
		for it := range strings.SplitSeq(s, ",") {
			if it = strings.TrimSpace(it); it != "" {
				e := reflect.New(f.Type().Elem()).Elem() // a string type of its own too
				if err := set(e, it); err != nil {
					return err
				}
				items = reflect.Append(items, e)
			}
		}
		f.Set(items)
	default:
		return fmt.Errorf("%w: %s", ErrUnsupported, f.Type())
	}
	return nil
}

// parseBool reads a variable's bool as a file's is read (YAML: true,
// false and the YAML 1.1 yes/no/on/off/y/n a file may hold), and as
// strconv.ParseBool does (1, 0, t, f, TRUE...).
func parseBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "yes", "y", "on":
		return true, nil
	case "no", "n", "off":
		return false, nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return false, errors.New("not a bool (true/false, yes/no, on/off, 1/0)")
	}
	return b, nil
}
