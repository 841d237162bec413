// Package jsonscan is the fast path of tflo's JSON decoders (the Kafka
// reading decoder, the pipeline's json and signal envelope decoders):
// scanning primitives that read the common shape of a record (objects
// of plain names, plain strings, numbers, literals) without allocating,
// and give up, returning -1 or nil, on anything else (an escape, a
// non-ASCII or control byte in a string, nesting deeper than MaxDepth,
// any syntax error). A decoder that gives up decodes the record with
// encoding/json, whose results and errors are the ones that count; each
// decoder's fuzz test checks that both paths agree wherever the fast one
// does not give up.
package jsonscan

import (
	"bytes"
	"strconv"
)

// MaxDepth is how deep SkipValue follows nested objects and arrays
// before it gives up.
const MaxDepth = 32

// WS returns the index of the first byte at or after i that is not JSON
// white space.
func WS(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// String returns the contents of the plain string at b[i] (an empty
// string is an empty, non-nil slice) and the index after it; nil for
// anything else: not a string, or one with an escape, a control or a
// non-ASCII byte.
func String(b []byte, i int) ([]byte, int) {
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

// Number returns the end of the JSON number at b[i], or -1. It does not
// look past the number: "01" ends after the 0, and the caller, seeing 1
// where a delimiter belongs, gives up.
func Number(b []byte, i int) int {
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

// Null reports whether the literal null starts at b[i].
func Null(b []byte, i int) bool {
	return len(b)-i >= 4 && string(b[i:i+4]) == "null"
}

// SkipScalar returns the index after the plain string, number, true,
// false or null at b[i], or -1 (objects and arrays included).
func SkipScalar(b []byte, i int) int {
	if i >= len(b) {
		return -1
	}
	switch {
	case b[i] == '"':
		if s, j := String(b, i); s != nil {
			return j
		}
		return -1
	case b[i] == '-' || (b[i] >= '0' && b[i] <= '9'):
		return Number(b, i)
	}
	for _, lit := range [...]string{"true", "false", "null"} {
		if len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit {
			return i + len(lit)
		}
	}
	return -1
}

// SkipValue returns the index after the value at b[i], objects and arrays
// (of plain names and strings, at most MaxDepth deep) included, or -1.
func SkipValue(b []byte, i int) int {
	return skipValue(b, i, 0)
}

func skipValue(b []byte, i, depth int) int {
	if i >= len(b) {
		return -1
	}
	switch b[i] {
	case '{':
		if depth >= MaxDepth {
			return -1
		}
		return Object(b, i, func(_ []byte, at int) int { return skipValue(b, at, depth+1) })
	case '[':
		if depth >= MaxDepth {
			return -1
		}
		i = WS(b, i+1)
		if i < len(b) && b[i] == ']' {
			return i + 1
		}
		for {
			if i = skipValue(b, i, depth+1); i < 0 {
				return -1
			}
			if i = WS(b, i); i >= len(b) {
				return -1
			}
			switch b[i] {
			case ',':
				i = WS(b, i+1)
			case ']':
				return i + 1
			default:
				return -1
			}
		}
	}
	return SkipScalar(b, i)
}

// Object scans the object at b[i]: it calls field with each member's
// name (a plain string, aliasing b) and the index of its value, in order;
// field returns the index after the value, or -1 to give up. Object
// returns the index after the closing brace, or -1.
func Object(b []byte, i int, field func(name []byte, at int) int) int {
	if i >= len(b) || b[i] != '{' {
		return -1
	}
	i = WS(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1
	}
	for {
		name, j := String(b, i)
		if name == nil {
			return -1
		}
		if j = WS(b, j); j >= len(b) || b[j] != ':' {
			return -1
		}
		if j = WS(b, j+1); j >= len(b) {
			return -1
		}
		if j = field(name, j); j < 0 {
			return -1
		}
		if j = WS(b, j); j >= len(b) {
			return -1
		}
		switch b[j] {
		case ',':
			i = WS(b, j+1)
		case '}':
			return j + 1
		default:
			return -1
		}
	}
}

// Int parses a JSON integer as encoding/json reads one into an int64
// (no fraction, no exponent, in range); false for anything else.
func Int(b []byte) (int64, bool) {
	if n, ok := smallInt(b); ok {
		return n, true
	}
	if Number(b, 0) != len(b) {
		return 0, false // strconv takes +1 and 01, JSON does not
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	return n, err == nil
}

// smallInt parses an integer of at most 18 digits (which cannot overflow
// int64) without strconv; false for anything else.
func smallInt(b []byte) (int64, bool) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 18 || len(b) > 1 && b[0] == '0' { // 01 is no JSON number
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

// Members scans the object at b[i] as encoding/json decodes one into a
// map[string]json.RawMessage and sets vals[k] to the raw value of member
// names[k] (aliasing b; the last one when a name repeats, as in the map;
// nil when absent). It returns the index after the object, or -1.
func Members(b []byte, i int, names []string, vals [][]byte) int {
	clear(vals)
	return Object(b, i, func(name []byte, at int) int {
		j := SkipValue(b, at)
		if j < 0 {
			return -1
		}
		for k, n := range names {
			if string(name) == n {
				vals[k] = b[at:j:j]
			}
		}
		return j
	})
}

// Fields scans the object at b[i] as encoding/json decodes one into a
// struct with a field for each of names (at most 64). For a member of one
// of names it calls value with the name's index and the index of the
// member's value; value reads the value as encoding/json would into that
// field (checking its type) and returns the index after it, or -1 to give
// up. Other members are skipped. Fields also gives up on a member whose
// name matches one of names only case-insensitively (encoding/json would
// take it for that field) and on a repeated one (encoding/json would
// check the type of each, and merge objects). It returns the index after
// the object, or -1.
func Fields(b []byte, i int, names []string, value func(k, at int) int) int {
	if len(names) > 64 {
		return -1
	}
	var seen uint64
	return Object(b, i, func(name []byte, at int) int {
		for k, n := range names {
			if string(name) == n {
				if seen&(1<<k) != 0 {
					return -1
				}
				seen |= 1 << k
				return value(k, at)
			}
			if len(name) == len(n) && bytes.EqualFold(name, []byte(n)) {
				return -1
			}
		}
		return SkipValue(b, at)
	})
}

// IntAt reads the value at b[i] as encoding/json reads one into an int64
// (or a pointer to one): null (which leaves the field as it was) or an
// integer in range. It returns the index after the value, or -1.
func IntAt(b []byte, i int) (n int64, null bool, end int) {
	if Null(b, i) {
		return 0, true, i + 4
	}
	j := Number(b, i)
	if j < 0 {
		return 0, false, -1
	}
	if n, ok := Int(b[i:j]); ok {
		return n, false, j
	}
	return 0, false, -1
}

// StringAt reads the value at b[i] as a plain string (aliasing b; nil
// for null). It returns the index after the value, or -1 (a string with
// escapes included, which encoding/json would decode).
func StringAt(b []byte, i int) (s []byte, end int) {
	if Null(b, i) {
		return nil, i + 4
	}
	s, j := String(b, i)
	if s == nil {
		return nil, -1
	}
	return s, j
}
