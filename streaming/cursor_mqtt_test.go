package streaming_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/streaming"
)

// windowModel is the reference the dedup window is checked against: the
// last cap distinct ids inserted, oldest first.
type windowModel struct {
	cap int
	ids []uint64
}

func (m *windowModel) observe(id uint64) bool {
	if slices.Contains(m.ids, id) {
		return true
	}
	m.ids = append(m.ids, id)
	if len(m.ids) > m.cap {
		m.ids = m.ids[1:]
	}
	return false
}

// Property: whatever sequence of ids arrives, the window never holds more
// than its capacity, reports a duplicate exactly when the id is among the
// last capacity distinct ids applied, and survives Bytes/Parse unchanged.
func TestMQTTCursorWindowProperty(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 7))
		capacity := 1 + rng.IntN(64)
		c, err := streaming.NewMQTTCursor(capacity, 0)
		require.NoError(t, err)
		model := &windowModel{cap: capacity}
		universe := uint64(1 + rng.IntN(4*capacity)) // small universe forces redeliveries
		for step := range 500 {
			id := rng.Uint64N(universe)
			pid := uint16(rng.Uint32())
			want := model.observe(id)
			got := c.Observe(id, pid)
			require.Equal(t, want, got, "seed %d step %d id %d", seed, step, id)
			require.LessOrEqual(t, c.WindowLen(), capacity, "seed %d step %d", seed, step)
			require.Equal(t, len(model.ids), c.WindowLen())
			if !got {
				require.Equal(t, pid, c.LastPacketID)
			}
			for _, in := range model.ids {
				require.True(t, c.Seen(in), "seed %d step %d: id %d inside the window not seen", seed, step, in)
			}
			if step%50 == 0 {
				back, err := streaming.ParseMQTTCursor(c.Bytes())
				require.NoError(t, err)
				require.Equal(t, c.Bytes(), back.Bytes())
				c = back // continue from the parsed copy: eviction order must survive
			}
		}
	}
}

func TestMQTTCursorFloodStaysBounded(t *testing.T) {
	c, err := streaming.NewMQTTCursor(16, 4)
	require.NoError(t, err)
	for i := range uint64(100_000) {
		require.False(t, c.Observe(i, uint16(i)))
		c.ObserveRetained(fmt.Sprintf("t/%d", i), i)
	}
	require.Equal(t, 16, c.WindowLen())
	require.Equal(t, 4, c.RetainedLen())
	require.LessOrEqual(t, len(c.Bytes()), 2+3+3+3+16*8+3+3+4*(1+10+10))
	// The newest 16 are remembered; the 17th newest has been evicted and a
	// very late redelivery of it would be applied again.
	require.True(t, c.Seen(99_999))
	require.True(t, c.Seen(100_000-16))
	require.False(t, c.Seen(100_000-17))
}

func TestMQTTCursorRetained(t *testing.T) {
	c, err := streaming.NewMQTTCursor(0, 2)
	require.NoError(t, err)
	require.Equal(t, streaming.DefaultMQTTWindow, c.WindowCap())
	require.False(t, c.ObserveRetained("a", 5))
	require.True(t, c.ObserveRetained("a", 5), "same sequence is stale")
	require.True(t, c.ObserveRetained("a", 4), "older sequence is stale")
	require.False(t, c.ObserveRetained("b", 1))
	require.False(t, c.ObserveRetained("a", 6), "advance moves a to most recent")
	require.False(t, c.ObserveRetained("c", 1), "evicts b, the least recently advanced")
	_, ok := c.RetainedSeq("b")
	require.False(t, ok)
	seq, ok := c.RetainedSeq("a")
	require.True(t, ok)
	require.Equal(t, uint64(6), seq)
	require.False(t, c.ObserveRetained("b", 1), "evicted topic is applied again")

	back, err := streaming.ParseMQTTCursor(c.Bytes())
	require.NoError(t, err)
	require.Equal(t, c.String(), back.String())
	require.True(t, back.ObserveRetained("b", 1))
	require.False(t, back.ObserveRetained("x", 1))
	_, ok = back.RetainedSeq("c") // c was least recent after b's re-entry
	require.False(t, ok)
}

// TestMQTTCursorRetainedDeadLetter: a topic's dead-lettered retained
// payload digest is kept in the retained map, replaced by the next one,
// evicted like a topic (the map stays bounded), kept by the encoding,
// and neither a topic's sequence nor the newest one.
func TestMQTTCursorRetainedDeadLetter(t *testing.T) {
	c, err := streaming.NewMQTTCursor(0, 3)
	require.NoError(t, err)
	_, ok := c.RetainedDeadLetter("a")
	require.False(t, ok)
	require.False(t, c.ObserveRetained("a", 5))
	c.ObserveRetainedDeadLetter("a", 0xfeed)
	c.ObserveRetainedDeadLetter("a", 0xbeef)
	require.Equal(t, 2, c.RetainedLen())
	seq, ok := c.RetainedSeq("a")
	require.True(t, ok)
	require.Equal(t, uint64(5), seq, "the topic's sequence is its own")
	newest, ok := c.NewestRetainedSeq()
	require.True(t, ok)
	require.Equal(t, uint64(5), newest, "a digest is not a sequence")

	back, err := streaming.ParseMQTTCursor(c.Bytes())
	require.NoError(t, err)
	d, ok := back.RetainedDeadLetter("a")
	require.True(t, ok)
	require.Equal(t, uint64(0xbeef), d)

	// Bounded: two more topics evict the least recently advanced entry.
	require.False(t, back.ObserveRetained("b", 1))
	require.False(t, back.ObserveRetained("c", 1))
	require.Equal(t, 3, back.RetainedLen())
	_, ok = back.RetainedSeq("a")
	require.False(t, ok)
	_, ok = back.RetainedDeadLetter("a")
	require.True(t, ok)
}

func TestMQTTMessageID(t *testing.T) {
	a := streaming.MQTTMessageID("s/1", 7, []byte("21.5"))
	require.Equal(t, a, streaming.MQTTMessageID("s/1", 7, []byte("21.5")), "redelivery maps to the same id")
	require.NotEqual(t, a, streaming.MQTTMessageID("s/1", 7, []byte("21.6")), "reused packet id, new payload")
	require.NotEqual(t, a, streaming.MQTTMessageID("s/2", 7, []byte("21.5")))
	require.NotEqual(t, a, streaming.MQTTMessageID("s/1", 8, []byte("21.5")))
	require.NotEqual(t, streaming.MQTTMessageID("ab", 1, []byte("c")), streaming.MQTTMessageID("a", 1, []byte("bc")), "topic and payload are framed apart")
}

func TestMQTTCursorCloneIsIndependent(t *testing.T) {
	c, err := streaming.NewMQTTCursor(4, 4)
	require.NoError(t, err)
	c.Observe(1, 1)
	c.ObserveRetained("t", 1)
	cl := c.Clone()
	c.Observe(2, 2)
	c.ObserveRetained("t", 2)
	require.False(t, cl.Seen(2))
	seq, _ := cl.RetainedSeq("t")
	require.Equal(t, uint64(1), seq)
	require.Equal(t, uint16(1), cl.LastPacketID)
}

// TestMQTTCursorGrownKeepsEntriesAndOrder: a grown cursor holds the same
// ids and topics, evicts them in the same order, and only then needs
// its new room; it never shrinks.
func TestMQTTCursorGrownKeepsEntriesAndOrder(t *testing.T) {
	c, err := streaming.NewMQTTCursor(3, 2)
	require.NoError(t, err)
	for id := uint64(1); id <= 4; id++ { // the window wraps: 2, 3, 4
		c.Observe(id, uint16(id))
	}
	c.ObserveRetained("a", 1)
	c.ObserveRetained("b", 1)
	g := c.Grown(5, 3)
	require.Equal(t, 5, g.WindowCap())
	require.Equal(t, 3, g.RetainedCap())
	require.Equal(t, uint16(4), g.LastPacketID)
	require.False(t, g.Seen(1))
	for id := uint64(2); id <= 4; id++ {
		require.True(t, g.Seen(id))
	}
	g.Observe(5, 5)
	g.Observe(6, 6)
	require.True(t, g.Seen(2), "two more ids fit before the oldest is evicted")
	g.Observe(7, 7)
	require.False(t, g.Seen(2))
	require.True(t, g.Seen(3))
	g.ObserveRetained("c", 1)
	g.ObserveRetained("d", 1)
	_, ok := g.RetainedSeq("a")
	require.False(t, ok, "the least recently advanced topic is evicted first")
	_, ok = g.RetainedSeq("b")
	require.True(t, ok)
	require.True(t, c.Seen(4) && !c.Seen(7), "the original is unchanged")

	same := c.Grown(1, 1)
	require.Equal(t, 3, same.WindowCap())
	require.Equal(t, 2, same.RetainedCap())
}

func TestNewMQTTCursorRefusesCapacities(t *testing.T) {
	for _, tc := range []struct{ w, r int }{{-1, 0}, {streaming.MaxMQTTWindow + 1, 0}, {0, -1}, {0, streaming.MaxMQTTRetained + 1}} {
		_, err := streaming.NewMQTTCursor(tc.w, tc.r)
		require.Error(t, err, "window %d retained %d", tc.w, tc.r)
	}
}

func TestParseMQTTCursorRefuses(t *testing.T) {
	c, _ := streaming.NewMQTTCursor(2, 2)
	c.Observe(10, 1)
	c.ObserveRetained("t", 3)
	valid := c.Bytes()
	tests := []struct {
		name string
		in   []byte
		want string
	}{
		{"empty", nil, "'M' tag"},
		{"future version", append([]byte{'M', 2}, valid[2:]...), "encoding version 2"},
		{"truncated", valid[:len(valid)-1], "truncated"},
		{"trailing", append(append([]byte(nil), valid...), 0), "trailing"},
		{"packet id", []byte{'M', 1, 0x80, 0x80, 0x04, 1, 0, 1, 0}, "exceeds 65535"},
		{"zero window", []byte{'M', 1, 0, 0, 0, 1, 0}, "capacity 0"},
		{"huge window", []byte{'M', 1, 0, 0xff, 0xff, 0x7f, 0}, "outside 1..65536"},
		{"overfull window", []byte{'M', 1, 0, 1, 2, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 1, 0}, "more than its capacity"},
		{"repeated id", []byte{'M', 1, 0, 2, 2, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0}, "repeats id"},
		{"window past end", []byte{'M', 1, 0, 4, 3, 1, 0, 0}, "runs past the end"},
		{"overfull retained", []byte{'M', 1, 0, 1, 0, 1, 2, 1, 'a', 1, 1, 'b', 1}, "more than its capacity"},
		{"repeated topic", []byte{'M', 1, 0, 1, 0, 2, 2, 1, 'a', 1, 1, 'a', 2}, `repeats topic "a"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := streaming.ParseMQTTCursor(tc.in)
			require.ErrorIs(t, err, streaming.ErrCorrupt)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func FuzzParseMQTTCursor(f *testing.F) {
	c, _ := streaming.NewMQTTCursor(3, 2)
	f.Add(c.Bytes())
	for i := range uint64(5) {
		c.Observe(i*0x1234567, uint16(i))
		c.ObserveRetained(fmt.Sprintf("home/%d", i), i)
	}
	f.Add(c.Bytes())
	f.Add([]byte{'M', 1, 0, 1, 0, 1, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := streaming.ParseMQTTCursor(b)
		if err != nil {
			if !errors.Is(err, streaming.ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		if c.WindowLen() > c.WindowCap() || c.RetainedLen() > c.RetainedCap() {
			t.Fatalf("parsed cursor over capacity: %s", c)
		}
		enc := c.Bytes()
		again, err := streaming.ParseMQTTCursor(enc)
		require.NoError(t, err)
		require.Equal(t, enc, again.Bytes())
		// The parsed cursor keeps working within its bounds.
		again.Observe(0xdeadbeef, 1)
		again.ObserveRetained("fuzz", 1)
		if again.WindowLen() > again.WindowCap() || again.RetainedLen() > again.RetainedCap() {
			t.Fatalf("cursor over capacity after observe: %s", again)
		}
	})
}
