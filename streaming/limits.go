package streaming

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"time"
	"unicode/utf8"
)

// DefaultKeyPattern is the key pattern of Limits when none is set:
// letters, digits and . _ : -, 1 to 128 bytes.
const DefaultKeyPattern = `[A-Za-z0-9._:-]{1,128}`

// Defaults of Limits' zero fields.
const (
	DefaultMaxKeyBytes = 128
	DefaultMaxAbsValue = 1e15
	DefaultMaxTSSkew   = time.Hour
)

// Limits bounds what one decoded reading (key, event time, input values)
// may carry before it reaches a graph. What decodes untrusted bytes
// checks every decoded record against its Limits and dead-letters one
// that falls outside with the reason; the rest of the stream goes on:
// package pipeline after its decoder (Kafka sources and Evaluate), and
// connectors/mqtt's Source (WithLimits). It is the one place those rules
// live: a pipeline spec's limits section is this struct (limits.key_pattern,
// limits.max_key_bytes, limits.max_abs_value, limits.max_ts_skew,
// limits.max_ts_age), and TSUnit is the pipeline's time_unit.
//
// Why each bound exists: a 1 MB key is refused by Kafka when the signal
// is published and ends up in every log line; 1e308 overflows running
// sums and squares of operators to Inf; a ts far in the future pins lag
// gauges and per-topic sequence maps, and ts × unit silently wraps int64.
//
// The zero value is the safe default. Compile it once, then check each
// record with the returned *LimitCheck.
type Limits struct {
	// KeyPattern is an RE2 regular expression the whole key must match
	// (it is anchored at both ends). Default DefaultKeyPattern. To accept
	// any key, set `(?s).+`; MaxKeyBytes still applies.
	KeyPattern string `json:"key_pattern,omitempty" yaml:"key_pattern,omitempty"`
	// MaxKeyBytes bounds the key length, checked before the pattern.
	// Default 128.
	MaxKeyBytes int `json:"max_key_bytes,omitempty" yaml:"max_key_bytes,omitempty"`
	// MaxAbsValue bounds |v| of every float input (and a signal's
	// payload). Default 1e15. NaN and ±Inf are always refused; set
	// math.MaxFloat64 to accept every finite value.
	MaxAbsValue float64 `json:"max_abs_value,omitempty" yaml:"max_abs_value,omitempty"`
	// MaxTSSkew is how far ahead of the clock an event time may be.
	// Default one hour; a negative value removes the bound (ts × unit
	// must still fit int64 nanoseconds: years 1677 to 2262).
	MaxTSSkew time.Duration `json:"max_ts_skew,omitempty" yaml:"max_ts_skew,omitempty"`
	// MaxTSAge is how far behind the clock an event time may be. Default
	// 0: no bound but the int64 nanosecond range (a replay of old data
	// must pass).
	MaxTSAge time.Duration `json:"max_ts_age,omitempty" yaml:"max_ts_age,omitempty"`
	// TSUnit is the unit of the event time. Default time.Millisecond.
	TSUnit time.Duration `json:"ts_unit,omitempty" yaml:"ts_unit,omitempty"`
	// Now is the clock the skew is measured against (default time.Now).
	Now func() time.Time `json:"-" yaml:"-"`
}

// LimitCheck is a compiled Limits. It is safe for concurrent use.
type LimitCheck struct {
	pattern string
	re      *regexp.Regexp // nil for DefaultKeyPattern: keyByte does its work
	maxKey  int
	maxAbs  float64
	skew    time.Duration // < 0: unbounded
	age     time.Duration // 0: unbounded
	unit    int64         // nanoseconds per ts unit
	now     func() time.Time
}

// Validate reports every problem with l as sentences.
func (l Limits) Validate() error {
	_, err := l.Compile()
	return err
}

// WithDefaults returns l with the defaults of its zero fields filled in
// (MaxTSAge's, 0, is no bound; Now stays nil: time.Now): the limits
// Compile checks, as `worker --print-config` shows them.
func (l Limits) WithDefaults() Limits {
	if l.KeyPattern == "" {
		l.KeyPattern = DefaultKeyPattern
	}
	if l.MaxKeyBytes == 0 {
		l.MaxKeyBytes = DefaultMaxKeyBytes
	}
	if l.MaxAbsValue == 0 {
		l.MaxAbsValue = DefaultMaxAbsValue
	}
	if l.MaxTSSkew == 0 {
		l.MaxTSSkew = DefaultMaxTSSkew
	}
	if l.TSUnit == 0 {
		l.TSUnit = time.Millisecond
	}
	return l
}

// Compile checks l, applies the defaults and returns the check.
func (l Limits) Compile() (*LimitCheck, error) {
	l = l.WithDefaults()
	c := &LimitCheck{pattern: l.KeyPattern, maxKey: l.MaxKeyBytes, maxAbs: l.MaxAbsValue, skew: l.MaxTSSkew, age: l.MaxTSAge, unit: int64(l.TSUnit), now: l.Now}
	if c.now == nil {
		c.now = time.Now
	}
	var errs []error
	if c.pattern != DefaultKeyPattern {
		// The pattern as written first: the error then quotes what the
		// user wrote, not the anchored form compiled below.
		if _, err := regexp.Compile(c.pattern); err != nil {
			errs = append(errs, fmt.Errorf("limits: key pattern %q: %v", c.pattern, err))
		} else if re, err := regexp.Compile(`^(?:` + c.pattern + `)$`); err != nil {
			errs = append(errs, fmt.Errorf("limits: key pattern %q: %v", c.pattern, err))
		} else {
			c.re = re
		}
	}
	if c.maxKey < 0 {
		errs = append(errs, fmt.Errorf("limits: max key bytes %d must be positive", c.maxKey))
	}
	if !(c.maxAbs > 0) || math.IsInf(c.maxAbs, 0) {
		errs = append(errs, fmt.Errorf("limits: max absolute value %v must be a positive finite number (math.MaxFloat64 for no bound)", c.maxAbs))
	}
	if c.age < 0 {
		errs = append(errs, fmt.Errorf("limits: max ts age %v must not be negative (0 for no bound)", c.age))
	}
	if c.unit < 0 || c.unit > int64(time.Hour) {
		errs = append(errs, fmt.Errorf("limits: ts unit %v must be between 1ns and 1h", time.Duration(c.unit)))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

// LimitError is a reading outside its Limits. It wraps ErrOutOfLimits.
type LimitError struct {
	Field  string // "key", "ts" or "value"
	Reason string
}

func (e *LimitError) Error() string { return "reading out of limits: " + e.Field + " " + e.Reason }

func (e *LimitError) Unwrap() error { return ErrOutOfLimits }

// Check checks one reading: its key, its event time in the configured
// unit, and its inputs (floats and signal payloads are bounded; None,
// ints and bools pass). The error is a *LimitError.
func (c *LimitCheck) Check(key []byte, ts int64, inputs []Computed) error {
	if err := checkKey(c, key); err != nil {
		return err
	}
	if err := c.CheckTS(ts); err != nil {
		return err
	}
	for i, v := range inputs {
		if k := v.Kind(); k != KindFloat && k != KindSignal {
			continue
		}
		if err := c.CheckValue(v.Float64()); err != nil {
			if len(inputs) > 1 {
				err.(*LimitError).Reason = "of input " + strconv.Itoa(i) + ": " + err.(*LimitError).Reason
			}
			return err
		}
	}
	return nil
}

// CheckReading is Check for a reading with a string key and one float
// value (it does not copy the key).
func (c *LimitCheck) CheckReading(key string, ts int64, value float64) error {
	if err := checkKey(c, key); err != nil {
		return err
	}
	if err := c.CheckTS(ts); err != nil {
		return err
	}
	return c.CheckValue(value)
}

// CheckKey checks a key's length and pattern.
func (c *LimitCheck) CheckKey(key []byte) error { return checkKey(c, key) }

func checkKey[T ~string | ~[]byte](c *LimitCheck, key T) error {
	if len(key) > c.maxKey {
		return &LimitError{Field: "key", Reason: fmt.Sprintf("%s is longer than %d bytes", QuoteKey(key), c.maxKey)}
	}
	var ok bool
	if c.re == nil {
		// DefaultKeyPattern without a regexp, which would cost more than
		// decoding the reading: 1 to 128 bytes of keyByte.
		ok = len(key) >= 1 && len(key) <= 128
		for i := 0; ok && i < len(key); i++ {
			ok = keyByte[key[i]]
		}
	} else {
		switch k := any(key).(type) {
		case string:
			ok = c.re.MatchString(k)
		case []byte:
			ok = c.re.Match(k)
		default:
			ok = c.re.MatchString(string(key))
		}
	}
	if !ok {
		return &LimitError{Field: "key", Reason: fmt.Sprintf("%s does not match %s", QuoteKey(key), c.pattern)}
	}
	return nil
}

// CheckValue checks one float: finite and within ±MaxAbsValue.
func (c *LimitCheck) CheckValue(v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) || math.Abs(v) > c.maxAbs {
		return &LimitError{Field: "value", Reason: fmt.Sprintf("%v is outside ±%v", v, c.maxAbs)}
	}
	return nil
}

// CheckTS checks an event time (in the configured unit): ts × unit fits
// int64 nanoseconds, and ts is at most MaxTSSkew ahead of the clock and,
// with MaxTSAge, at most that far behind.
func (c *LimitCheck) CheckTS(ts int64) error {
	lo, hi := math.MinInt64/c.unit, math.MaxInt64/c.unit
	if ts < lo || ts > hi {
		return &LimitError{Field: "ts", Reason: fmt.Sprintf("%d × %v does not fit the int64 nanosecond range", ts, time.Duration(c.unit))}
	}
	if c.skew < 0 && c.age == 0 {
		return nil
	}
	now := c.now().UnixNano()
	at := ts * c.unit
	if c.skew >= 0 && at > now && at-now > int64(c.skew) {
		return &LimitError{Field: "ts", Reason: fmt.Sprintf("%d is %v ahead of the clock (%s), more than the allowed %v",
			ts, time.Duration(at-now).Round(time.Second), time.Unix(0, now).UTC().Format(time.RFC3339), c.skew)}
	}
	if c.age > 0 && at < now && (now-at > int64(c.age) || now-at < 0) {
		return &LimitError{Field: "ts", Reason: fmt.Sprintf("%d is more than %v behind the clock (%s)",
			ts, c.age, time.Unix(0, now).UTC().Format(time.RFC3339))}
	}
	return nil
}

// keyByte holds the bytes of DefaultKeyPattern's class [A-Za-z0-9._:-].
var keyByte = func() (t [256]bool) {
	for _, c := range []byte("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:-") {
		t[c] = true
	}
	return t
}()

// maxQuotedKey is how much of a key a message quotes.
const maxQuotedKey = 64

// QuoteKey quotes a key for an error or a log line: whole when it has at
// most 64 bytes, else its first 64 bytes (cut at a rune boundary)
// followed by "…" and the full length, so a hostile megabyte-long key
// never fills a log.
func QuoteKey[T ~string | ~[]byte](key T) string {
	if len(key) <= maxQuotedKey {
		return strconv.Quote(string(key))
	}
	n := maxQuotedKey
	for n > maxQuotedKey-utf8.UTFMax && !utf8.RuneStart(key[n]) {
		n--
	}
	return strconv.Quote(string(key[:n])) + "… (" + strconv.Itoa(len(key)) + " bytes)"
}
