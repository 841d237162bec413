package parquet

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The dictionary's cache by address must give one id per distinct string
// whatever the addresses: copies share an id, and a prefix sharing its
// string's bytes does not.
func TestStringDictIDsByContent(t *testing.T) {
	var d stringDict
	d.reset()
	long := strings.Clone("sensor-0001")
	copy1 := strings.Clone(long)
	prefix := long[:6] // "sensor": the same address, fewer bytes
	ids := []int32{d.id(long), d.id(copy1), d.id(prefix), d.id(""), d.id(long), d.id(prefix), d.id(strings.Clone(""))}
	assert.Equal(t, []int32{0, 0, 1, 2, 0, 1, 2}, ids)
	assert.Equal(t, []string{"sensor-0001", "sensor", ""}, d.values)

	// Many distinct strings: the cache's slots are overwritten, ids stay
	// right.
	d.reset()
	var keys []string
	for i := range 1000 {
		keys = append(keys, strings.Repeat("k", i%37+1)+string(rune('a'+i%26)))
	}
	first := map[string]int32{}
	for range 3 {
		for _, k := range keys {
			id := d.id(strings.Clone(k))
			if w, ok := first[k]; ok {
				assert.Equal(t, w, id, "key %q", k)
			} else {
				first[k] = id
			}
			assert.Equal(t, k, d.values[id])
		}
	}
	assert.Len(t, d.values, len(first))
}
