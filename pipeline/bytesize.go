package pipeline

import (
	"fmt"
	"strconv"
	"strings"
)

// ByteSize is a number of bytes that reads and writes as text: "256MiB",
// "1GiB", "64MB" (powers of 1000), "4096" or "4KiB".
type ByteSize int64

var byteUnits = []struct {
	suffix string
	n      int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40},
	{"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"TB", 1e12}, {"B", 1},
}

// UnmarshalText parses a size.
func (b *ByteSize) UnmarshalText(text []byte) error {
	s := strings.TrimSpace(string(text))
	mult := int64(1)
	for _, u := range byteUnits {
		if rest, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = strings.TrimSpace(rest), u.n
			break
		}
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || !(n >= 0) || n*float64(mult) > 1<<62 { // !(n >= 0): NaN too
		return fmt.Errorf("size %q is not a number of bytes like 256MiB, 64MB or 4096", text)
	}
	size := ByteSize(n * float64(mult)) // a fraction of a byte is dropped
	if size == 0 && n > 0 {
		// Not 0: a size of 0 is "the default" to every setting, so
		// memory: 0.5 (GiB meant) would silently be 256MiB.
		return fmt.Errorf("size %q is less than one byte: give a unit, like 0.5GiB", text)
	}
	*b = size
	return nil
}

// MarshalText writes the size in the largest binary unit that divides it.
func (b ByteSize) MarshalText() ([]byte, error) { return []byte(b.String()), nil }

// String formats b ("256MiB").
func (b ByteSize) String() string {
	for i := 3; i >= 0; i-- { // TiB down to KiB
		if u := byteUnits[i]; b != 0 && int64(b)%u.n == 0 {
			return strconv.FormatInt(int64(b)/u.n, 10) + u.suffix
		}
	}
	return strconv.FormatInt(int64(b), 10)
}
