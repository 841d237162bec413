package streaming

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ParamKind is the type of an operator parameter.
type ParamKind uint8

// The kinds of operator parameters. Values reach New as int64, float64,
// bool, string and time.Duration respectively.
const (
	ParamInt ParamKind = iota + 1
	ParamFloat
	ParamBool
	ParamString
	ParamDuration
)

func (k ParamKind) String() string {
	switch k {
	case ParamInt:
		return "int"
	case ParamFloat:
		return "float"
	case ParamBool:
		return "bool"
	case ParamString:
		return "string"
	case ParamDuration:
		return "duration"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// MarshalText writes the kind's name ("int", "duration").
func (k ParamKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// Param declares one parameter of an operator type.
type Param struct {
	// Name as written in a spec ("window").
	Name string `json:"name"`
	// Kind is the value's type.
	Kind ParamKind `json:"kind"`
	// Default is the value when a spec omits the parameter, of the Go type
	// Kind names (int64, float64, bool, string, time.Duration); nil makes
	// the parameter required.
	Default any `json:"default,omitempty"`
	// Doc is one sentence for `starter operators` and error messages.
	Doc string `json:"doc"`
	// Enum lists the accepted values of a ParamString (nil: any string).
	Enum []string `json:"enum,omitempty"`
	// Min and Max bound a ParamInt, ParamFloat or ParamDuration (in
	// seconds for durations); nil means unbounded on that side.
	Min *float64 `json:"min,omitempty"`
	Max *float64 `json:"max,omitempty"`
}

// Bound returns a pointer to v, for Param.Min and Param.Max.
func Bound(v float64) *float64 { return &v }

// OperatorType describes a kind of operator: what a registry lists and
// what a pipeline spec names by Name. Catalog packages declare one per
// operator (see ops.Register, fintech.Register); users declare their own
// the same way.
type OperatorType struct {
	// Name is the registered type name ("sma"); specs refer to it.
	Name string `json:"name"`
	// Doc says what the operator computes, in a sentence or two.
	Doc string `json:"doc"`
	// Params are the accepted parameters, in documentation order.
	Params []Param `json:"params,omitempty"`
	// MinInputs and MaxInputs bound how many inputs a node of this type
	// is wired with (MaxInputs < 0: no upper bound).
	MinInputs int `json:"min_inputs"`
	MaxInputs int `json:"max_inputs"`
	// Inputs documents what the inputs mean ("value", "price, volume").
	Inputs string `json:"inputs,omitempty"`
	// Output documents what the node emits and when.
	Output string `json:"output"`
	// Modes names the modes of the signals the node emits (nil when it
	// emits plain values); sinks use the names (an Influx "mode" tag).
	Modes map[Mode]string `json:"modes,omitempty"`
	// TypeVersion is the operator's state type version (Operator.TypeVersion):
	// Factory refuses a type whose operators have another.
	TypeVersion uint32 `json:"type_version"`
	// New checks the parameters (already defaulted and of the declared
	// kinds) and returns the factory a graph calls once per key. Errors
	// name the parameter; the registry adds the operator.
	New func(p Params) (func() Operator, error) `json:"-"`
}

// ModeName returns the registered name of mode m, or its number.
func (t OperatorType) ModeName(m Mode) string {
	if n, ok := t.Modes[m]; ok {
		return n
	}
	return strconv.Itoa(int(m))
}

// Warmup is a windowed operator's warm-up policy: what it emits before
// its window (or period) has filled for the first time.
type Warmup uint8

// The warm-up policies.
const (
	// WarmupFull emits nothing until the window is full: every output
	// covers a whole window.
	WarmupFull Warmup = iota
	// WarmupPartial emits from the first value on, over the values seen
	// so far (a mean of 3 values while a window of 10 fills).
	WarmupPartial
)

// WarmupParamName is the name of the warm-up parameter in specs.
const WarmupParamName = "warmup"

var warmupNames = []string{"full", "partial"}

func (w Warmup) String() string {
	if int(w) < len(warmupNames) {
		return warmupNames[w]
	}
	return "warmup(" + strconv.Itoa(int(w)) + ")"
}

// ParseWarmup reads a policy by name ("full", "partial").
func ParseWarmup(s string) (Warmup, error) {
	if i := slices.Index(warmupNames, s); i >= 0 {
		return Warmup(i), nil
	}
	return 0, fmt.Errorf("warm-up %q is not one of %s", s, strings.Join(warmupNames, ", "))
}

// WarmupParam declares the "warmup" parameter of a windowed operator,
// defaulting to def. Read it with Params.Warmup.
func WarmupParam(def Warmup) Param {
	return Param{Name: WarmupParamName, Kind: ParamString, Default: def.String(), Enum: slices.Clone(warmupNames),
		Doc: "what the node emits before its window first fills: full (nothing until it is full) or partial (results over the values seen so far)"}
}

// Params are an operator's parameter values after defaults, keyed by name.
// The accessors panic on a name the type does not declare, or a value of
// another kind: both are bugs in the operator's New, not in the spec.
type Params struct{ m map[string]any }

// NewParams returns Params holding m (for tests and Go-built graphs that
// call an OperatorType's New directly).
func NewParams(m map[string]any) Params { return Params{m: maps.Clone(m)} }

func (p Params) get(name string) any {
	v, ok := p.m[name]
	if !ok {
		panic(fmt.Sprintf("operator parameter %q is not declared", name))
	}
	return v
}

// Has reports whether name has a value.
func (p Params) Has(name string) bool { _, ok := p.m[name]; return ok }

// Int returns an int parameter.
func (p Params) Int(name string) int { return int(p.get(name).(int64)) }

// Float returns a float parameter.
func (p Params) Float(name string) float64 { return p.get(name).(float64) }

// Bool returns a bool parameter.
func (p Params) Bool(name string) bool { return p.get(name).(bool) }

// String returns a string parameter.
func (p Params) String(name string) string { return p.get(name).(string) }

// Duration returns a duration parameter.
func (p Params) Duration(name string) time.Duration { return p.get(name).(time.Duration) }

// Warmup returns the "warmup" parameter (declared with WarmupParam).
func (p Params) Warmup() Warmup {
	w, err := ParseWarmup(p.String(WarmupParamName))
	if err != nil {
		panic(err) // Resolve checked the enum
	}
	return w
}

// Map returns a copy of the values, keyed by name.
func (p Params) Map() map[string]any { return maps.Clone(p.m) }

// ParamError is returned for a parameter a registry cannot accept; it
// names the operator type, the parameter and the problem.
type ParamError struct {
	Operator string
	Param    string // empty when the problem is not one parameter's
	Reason   string
}

func (e *ParamError) Error() string {
	if e.Param == "" {
		return fmt.Sprintf("operator %q: %s", e.Operator, e.Reason)
	}
	return fmt.Sprintf("operator %q: parameter %q: %s", e.Operator, e.Param, e.Reason)
}

// ErrUnknownOperator is wrapped by errors for a type name no registry
// entry has.
var ErrUnknownOperator = errors.New("unknown operator type")

// Registry maps operator type names to OperatorTypes. It is safe for
// concurrent use.
type Registry struct {
	mu    sync.RWMutex
	types map[string]OperatorType
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{types: map[string]OperatorType{}} }

// Register adds t. It refuses an empty or taken name, a nil New, an
// invalid parameter declaration or a default that fails its own bounds.
func (r *Registry) Register(t OperatorType) error {
	if t.Name == "" {
		return errors.New("register operator: empty type name")
	}
	if t.New == nil {
		return &ParamError{Operator: t.Name, Reason: "nil New"}
	}
	if t.MinInputs < 0 || (t.MaxInputs >= 0 && t.MaxInputs < t.MinInputs) {
		return &ParamError{Operator: t.Name, Reason: fmt.Sprintf("input bounds %d..%d are inverted", t.MinInputs, t.MaxInputs)}
	}
	seen := map[string]bool{}
	for _, p := range t.Params {
		if p.Name == "" || seen[p.Name] {
			return &ParamError{Operator: t.Name, Param: p.Name, Reason: "empty or repeated parameter name"}
		}
		seen[p.Name] = true
		if p.Kind < ParamInt || p.Kind > ParamDuration {
			return &ParamError{Operator: t.Name, Param: p.Name, Reason: "no kind"}
		}
		// coerce checks Enum for strings only and Min/Max for numbers
		// only: elsewhere they would be accepted and silently ignored.
		if len(p.Enum) > 0 && p.Kind != ParamString {
			return &ParamError{Operator: t.Name, Param: p.Name, Reason: fmt.Sprintf("kind %v takes no enum (only strings do)", p.Kind)}
		}
		if (p.Min != nil || p.Max != nil) && (p.Kind == ParamBool || p.Kind == ParamString) {
			return &ParamError{Operator: t.Name, Param: p.Name, Reason: fmt.Sprintf("kind %v takes no bounds (only numbers and durations do)", p.Kind)}
		}
		if (p.Min != nil && math.IsNaN(*p.Min)) || (p.Max != nil && math.IsNaN(*p.Max)) || (p.Min != nil && p.Max != nil && *p.Min > *p.Max) {
			return &ParamError{Operator: t.Name, Param: p.Name, Reason: fmt.Sprintf("bounds [%v, %v] admit no value", fmtBound(p.Min), fmtBound(p.Max))}
		}
		if p.Default != nil {
			if _, err := coerce(t.Name, p, p.Default); err != nil {
				return fmt.Errorf("default: %w", err)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, dup := r.types[t.Name]; dup {
		return &ParamError{Operator: t.Name, Reason: "type name already registered"}
	}
	t.Params = slices.Clone(t.Params)
	r.types[t.Name] = t
	return nil
}

// fmtBound formats a Param bound, "none" when nil.
func fmtBound(b *float64) string {
	if b == nil {
		return "none"
	}
	return strconv.FormatFloat(*b, 'g', -1, 64)
}

// MustRegister is Register that panics, for catalogs registering their
// own (tested) types.
func (r *Registry) MustRegister(ts ...OperatorType) {
	for _, t := range ts {
		if err := r.Register(t); err != nil {
			panic(err)
		}
	}
}

// Lookup returns the type registered under name.
func (r *Registry) Lookup(name string) (OperatorType, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.types[name]
	return t, ok
}

// Types returns every registered type, sorted by name.
func (r *Registry) Types() []OperatorType {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := slices.Collect(maps.Values(r.types))
	slices.SortFunc(out, func(a, b OperatorType) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Resolve checks raw parameter values (as decoded from YAML or JSON:
// numbers may be int or float, durations strings like "5s") against
// type name's declaration, applies defaults, and returns the Params.
// Errors are *ParamError values naming the parameter, every problem of
// the parameters at once (several joined with errors.Join); an unknown
// type wraps ErrUnknownOperator.
func (r *Registry) Resolve(name string, raw map[string]any) (OperatorType, Params, error) {
	t, ok := r.Lookup(name)
	if !ok {
		known := r.names()
		if len(known) == 0 {
			return OperatorType{}, Params{}, fmt.Errorf("%w %q (the registry is empty: none is registered)", ErrUnknownOperator, name)
		}
		return OperatorType{}, Params{}, fmt.Errorf("%w %q (known: %s)", ErrUnknownOperator, name, strings.Join(known, ", "))
	}
	known := map[string]Param{}
	for _, p := range t.Params {
		known[p.Name] = p
	}
	var errs []error
	for _, k := range slices.Sorted(maps.Keys(raw)) {
		if _, ok := known[k]; !ok {
			if len(t.Params) == 0 {
				errs = append(errs, &ParamError{Operator: name, Param: k, Reason: "unknown parameter (the operator takes none)"})
				continue
			}
			names := make([]string, len(t.Params))
			for i, p := range t.Params {
				names[i] = p.Name
			}
			errs = append(errs, &ParamError{Operator: name, Param: k, Reason: fmt.Sprintf("unknown parameter (accepted: %s)", strings.Join(names, ", "))})
		}
	}
	vals := make(map[string]any, len(t.Params))
	for _, p := range t.Params {
		v, given := raw[p.Name]
		if !given || v == nil {
			if p.Default == nil {
				errs = append(errs, &ParamError{Operator: name, Param: p.Name, Reason: "required (" + p.Doc + ")"})
				continue
			}
			v = p.Default
		}
		c, err := coerce(name, p, v)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		vals[p.Name] = c
	}
	switch len(errs) {
	case 0:
		return t, Params{m: vals}, nil
	case 1:
		return t, Params{}, errs[0]
	default:
		return t, Params{}, errors.Join(errs...)
	}
}

// Factory resolves the parameters and calls the type's New. It refuses a
// type whose operators' TypeVersion is not the declared one.
func (r *Registry) Factory(name string, raw map[string]any) (func() Operator, error) {
	t, p, err := r.Resolve(name, raw)
	if err != nil {
		return nil, err
	}
	f, err := t.New(p)
	if err != nil {
		return nil, newError(name, err)
	}
	if f == nil {
		return nil, &ParamError{Operator: name, Reason: "New returned a nil factory"}
	}
	// The declared TypeVersion is what a registry lists (starter
	// operators); nothing else compared it with the operator's, so a type
	// whose two disagree listed the wrong version. The first operator is
	// built here to check, and handed to the factory's first caller (a
	// graph builds one at once), so no operator is built for nothing.
	op := f()
	if op == nil {
		return f, nil // the graph names the node whose factory returned nil
	}
	if v := op.TypeVersion(); v != t.TypeVersion {
		return nil, &ParamError{Operator: name, Reason: fmt.Sprintf(
			"declared TypeVersion %d, but the operator its New builds (%q) has TypeVersion %d", t.TypeVersion, op.Name(), v)}
	}
	var taken atomic.Bool
	return func() Operator {
		if taken.CompareAndSwap(false, true) {
			first := op
			op = nil // only this call reads op: the factory keeps no operator
			return first
		}
		return f()
	}, nil
}

// newError is the refusal err of operator type op's New as a *ParamError
// naming the operator; each of a joined error's refusals is one (a New
// refusing several parameters at once, as Resolve does: taking the first
// *ParamError of the join dropped the others).
func newError(op string, err error) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok && len(j.Unwrap()) > 0 {
		var errs []error
		for _, e := range j.Unwrap() {
			errs = append(errs, newError(op, e))
		}
		return errors.Join(errs...)
	}
	var pe *ParamError
	if errors.As(err, &pe) {
		if pe.Operator == "" {
			cp := *pe
			cp.Operator = op
			return &cp
		}
		return err
	}
	return &ParamError{Operator: op, Reason: err.Error()}
}

func (r *Registry) names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return slices.Sorted(maps.Keys(r.types))
}

// coerce turns a decoded value into the Go type of p.Kind and checks
// Enum, Min and Max.
func coerce(op string, p Param, v any) (any, error) {
	bad := func(format string, args ...any) error {
		return &ParamError{Operator: op, Param: p.Name, Reason: fmt.Sprintf(format, args...)}
	}
	var num float64
	var out any
	switch p.Kind {
	case ParamInt:
		switch x := v.(type) {
		case int:
			out, num = int64(x), float64(x)
		case int64:
			out, num = x, float64(x)
		case uint64:
			if x > math.MaxInt64 {
				return nil, bad("%d does not fit an int", x)
			}
			out, num = int64(x), float64(x)
		case float64:
			// A whole number written with an exponent or a point ("1e16",
			// "3.0") decodes as a float; it is an int when it fits one, as
			// a config key's is, not "not an integer" past 2^53.
			if x != math.Trunc(x) || math.IsInf(x, 0) {
				return nil, bad("%v is not an integer", x)
			}
			if x < math.MinInt64 || x >= math.MaxInt64 {
				return nil, bad("%v does not fit an int", x)
			}
			out, num = int64(x), x
		default:
			return nil, bad("want an int, got %T %v", v, v)
		}
	case ParamFloat:
		switch x := v.(type) {
		case int:
			out, num = float64(x), float64(x)
		case int64:
			out, num = float64(x), float64(x)
		case uint64:
			out, num = float64(x), float64(x)
		case float64:
			out, num = x, x
		default:
			return nil, bad("want a number, got %T %v", v, v)
		}
		if math.IsNaN(num) || math.IsInf(num, 0) {
			return nil, bad("%v is not a finite number", num)
		}
	case ParamBool:
		b, ok := v.(bool)
		if !ok {
			return nil, bad("want true or false, got %T %v", v, v)
		}
		return b, nil
	case ParamString:
		s, ok := v.(string)
		if !ok {
			return nil, bad("want a string, got %T %v", v, v)
		}
		if len(p.Enum) > 0 && !slices.Contains(p.Enum, s) {
			return nil, bad("%q is not one of %s", s, strings.Join(p.Enum, ", "))
		}
		return s, nil
	case ParamDuration:
		switch x := v.(type) {
		case time.Duration:
			out = x
		case string:
			d, err := time.ParseDuration(x)
			if err != nil {
				return nil, bad("%q is not a duration like 5s or 1m30s", x)
			}
			out = d
		default:
			return nil, bad("want a duration like \"5s\", got %T %v", v, v)
		}
		num = out.(time.Duration).Seconds()
	default:
		return nil, bad("unknown kind %v", p.Kind)
	}
	if p.Min != nil && num < *p.Min {
		return nil, bad("%v is below the minimum %v", num, *p.Min)
	}
	if p.Max != nil && num > *p.Max {
		return nil, bad("%v is above the maximum %v", num, *p.Max)
	}
	return out, nil
}
