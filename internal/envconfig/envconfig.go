package envconfig

import (
	"encoding"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Prefix is the prefix of every tflo worker's variables.
const Prefix = "TFLO"

// Key is one configurable leaf field.
type Key struct {
	Env  string // TFLO_KAFKA_BROKERS
	Path string // kafka.brokers
	Type string // Go type, e.g. []string
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
	if path != "" {
		b, err := readFile(path)
		if err != nil {
			return err
		}
		if err := Decode(b, dst); err != nil {
			return withFile(err, path)
		}
	}
	if err := Apply(prefix, dst, os.LookupEnv); err != nil {
		return err
	}
	if d, ok := dst.(Defaulter); ok {
		d.ApplyDefaults()
	}
	if v, ok := dst.(Validator); ok {
		return v.Validate()
	}
	return nil
}

// Apply sets the fields of dst whose variable lookup finds.
func Apply(prefix string, dst any, lookup func(string) (string, bool)) error {
	v := reflect.ValueOf(dst)
	if v.Kind() != reflect.Pointer || v.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("envconfig: destination is %T, want a pointer to a struct", dst)
	}
	return walk(v.Elem(), nil, func(f reflect.Value, path []string) error {
		name := Name(prefix, path...)
		s, ok := lookup(name)
		if !ok {
			return errNotSet
		}
		if err := set(f, s); err != nil {
			return fmt.Errorf("environment %s=%q (%s): %w", name, s, strings.Join(path, "."), err)
		}
		return nil
	}, true)
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
	err := walk(v, nil, func(f reflect.Value, path []string) error {
		out = append(out, Key{Env: Name(prefix, path...), Path: strings.Join(path, "."), Type: f.Type().String()})
		return nil
	}, false)
	return out, err
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

// walk calls fn for every leaf field of the struct v with its YAML path.
// With alloc, nil struct pointers are allocated only when a leaf below
// them is set (fn reports it by a lookup hit), so absent sections stay nil;
// a pointer to a leaf (*bool: unset means the default) likewise.
func walk(v reflect.Value, path []string, fn func(reflect.Value, []string) error, alloc bool) error {
	t := v.Type()
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name, inline := yamlName(sf)
		if name == "-" {
			continue
		}
		p := append(append([]string(nil), path...), name)
		if inline {
			p = path
		}
		f := v.Field(i)
		ft := sf.Type
		switch {
		case leaf(ft):
			if err := fn(f, p); err != nil && err != errNotSet {
				return err
			}
		case ft.Kind() == reflect.Pointer && leaf(ft.Elem()):
			tmp := reflect.New(ft.Elem())
			if !f.IsNil() {
				tmp.Elem().Set(f.Elem())
			}
			switch err := fn(tmp.Elem(), p); {
			case err == errNotSet:
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
			err := walk(tmp.Elem(), p, func(lf reflect.Value, lp []string) error {
				err := fn(lf, lp)
				if err == nil {
					hit = true
				}
				return err
			}, alloc)
			if err != nil {
				return err
			}
			if alloc && f.IsNil() && hit && !tmp.Elem().IsZero() {
				f.Set(tmp)
			}
		default:
			// No text form (lists of sections, maps, interfaces): set in
			// the file only.
		}
	}
	return nil
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
	if f.Type() == durationType {
		d, err := time.ParseDuration(s)
		if err != nil {
			return err
		}
		f.SetInt(int64(d))
		return nil
	}
	switch f.Kind() {
	case reflect.String:
		f.SetString(s)
	case reflect.Bool:
		b, err := strconv.ParseBool(s)
		if err != nil {
			return err
		}
		f.SetBool(b)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(s, 10, f.Type().Bits())
		if err != nil {
			return err
		}
		f.SetInt(n)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		n, err := strconv.ParseUint(s, 10, f.Type().Bits())
		if err != nil {
			return err
		}
		f.SetUint(n)
	case reflect.Float32, reflect.Float64:
		n, err := strconv.ParseFloat(s, f.Type().Bits())
		if err != nil {
			return err
		}
		f.SetFloat(n)
	case reflect.Slice:
		var items []string
		for it := range strings.SplitSeq(s, ",") {
			if it = strings.TrimSpace(it); it != "" {
				items = append(items, it)
			}
		}
		f.Set(reflect.ValueOf(items).Convert(f.Type()))
	default:
		return fmt.Errorf("%w: %s", ErrUnsupported, f.Type())
	}
	return nil
}
