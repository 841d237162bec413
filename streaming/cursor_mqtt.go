package streaming

import (
	"container/list"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/tflo-io/tflo/internal/wire"
)

// CursorTypeMQTT is the SnapshotMeta.CursorType and CursorRecord.Type of an
// MQTTCursor.
const CursorTypeMQTT = "mqtt"

// Bounds of an MQTTCursor. The dedup window and the retained map never hold
// more entries than their capacity, whatever the broker redelivers, and a
// parsed cursor never has a capacity above these maxima, so a hostile or
// corrupt cursor cannot make a process allocate without bound.
const (
	// DefaultMQTTWindow is the dedup-window capacity NewMQTTCursor uses
	// for a capacity of 0: well above the receive maximum brokers
	// typically grant a QoS-2 subscriber.
	DefaultMQTTWindow = 1024
	// DefaultMQTTRetained is the retained-map capacity NewMQTTCursor uses
	// for a capacity of 0.
	DefaultMQTTRetained = 4096
	// MaxMQTTWindow is the largest dedup-window capacity.
	MaxMQTTWindow = 1 << 16
	// MaxMQTTRetained is the largest retained-map capacity.
	MaxMQTTRetained = 1 << 16
)

// mqttCursorVersion is the version byte of the MQTTCursor encoding:
//
//	'M' | version | uvarint last packet id
//	| uvarint window capacity | uvarint n | n × 8-byte little-endian ids, oldest first
//	| uvarint retained capacity | uvarint m | m × (uvarint len(topic) topic | uvarint seq), least recently advanced first
const mqttCursorVersion = 1

// MQTTCursor is the position of an MQTT subscription: the packet id of the
// last message applied, a QoS-2 dedup window of message ids recently
// applied, and a map from retained topic to the sequence of the last
// retained message applied on it.
//
// # Dedup window
//
// The window has a fixed capacity. Observe adds a message id that is not in
// it; when the window is full, the OLDEST-INSERTED id is evicted first (a
// FIFO, not an LRU: seeing a duplicate does not refresh it). The window
// therefore remembers exactly the last Capacity distinct messages applied.
// A redelivery arriving after Capacity newer distinct messages has been
// forgotten and is applied again: for that record the guarantee degrades
// from exactly-once to at-least-once. MQTT bounds how far back a broker
// redelivers by the receive maximum (the in-flight limit), so a window
// comfortably above the granted receive maximum, and above the number of
// messages that arrive while one is redelivered, makes that case
// unreachable in practice.
//
// Message ids are the caller's; MQTTMessageID derives one from topic,
// packet id and payload. Keying by packet id alone would be wrong: brokers
// reuse a packet id as soon as its flow completes, and the new message
// would be dropped as a duplicate.
//
// # Retained map
//
// ObserveRetained reports a retained message whose sequence is not above
// the one recorded for its topic (a retained message re-sent on
// resubscribe). The map is bounded too: past its capacity the topic
// advanced least recently is evicted, and a retained message for an evicted
// topic is applied again. ObserveRetainedDeadLetter keeps the digest of a
// topic's dead-lettered retained payload in the same map, under a key no
// topic can have.
//
// # Concurrency
//
// An MQTTCursor is not safe for concurrent use: it belongs to the goroutine
// that consumes the subscription. Bytes returns an independent encoding,
// which is how a snapshot captures the cursor at a cut.
type MQTTCursor struct {
	// LastPacketID is the packet id of the last message Observe accepted.
	LastPacketID uint16

	ring []uint64 // capacity = window capacity; entries [head, head+n) mod cap
	head int
	n    int
	set  map[uint64]struct{}

	retainedCap int
	retained    map[string]*list.Element // topic -> element holding *retainedEntry
	order       list.List                // least recently advanced at the front
}

type retainedEntry struct {
	topic string
	seq   uint64
}

var _ Cursor = (*MQTTCursor)(nil)

// NewMQTTCursor returns an empty cursor with the given dedup-window and
// retained-map capacities; 0 selects DefaultMQTTWindow and
// DefaultMQTTRetained. A capacity above MaxMQTTWindow / MaxMQTTRetained or
// below 0 is an error.
func NewMQTTCursor(windowCap, retainedCap int) (*MQTTCursor, error) {
	if windowCap == 0 {
		windowCap = DefaultMQTTWindow
	}
	if retainedCap == 0 {
		retainedCap = DefaultMQTTRetained
	}
	if windowCap < 1 || windowCap > MaxMQTTWindow {
		return nil, fmt.Errorf("mqtt cursor: dedup window capacity %d is outside 1..%d", windowCap, MaxMQTTWindow)
	}
	if retainedCap < 1 || retainedCap > MaxMQTTRetained {
		return nil, fmt.Errorf("mqtt cursor: retained map capacity %d is outside 1..%d", retainedCap, MaxMQTTRetained)
	}
	return newMQTTCursor(windowCap, retainedCap), nil
}

func newMQTTCursor(windowCap, retainedCap int) *MQTTCursor {
	return &MQTTCursor{
		ring:        make([]uint64, windowCap),
		set:         make(map[uint64]struct{}, min(windowCap, 1024)),
		retainedCap: retainedCap,
		retained:    make(map[string]*list.Element, min(retainedCap, 1024)),
	}
}

// MQTTMessageID derives a dedup id for a message from its topic, packet id
// and payload (64-bit FNV-1a). A redelivery has all three equal, so it
// maps to the same id; a new message on a reused packet id differs in
// payload or topic. Two distinct messages with equal topic, packet id and
// payload inside one window are indistinguishable and count as one.
func MQTTMessageID(topic string, packetID uint16, payload []byte) uint64 {
	h := fnv.New64a()
	var b [2 + binary.MaxVarintLen64]byte
	n := binary.PutUvarint(b[:], uint64(len(topic)))
	h.Write(b[:n])
	h.Write([]byte(topic))
	binary.LittleEndian.PutUint16(b[:2], packetID)
	h.Write(b[:2])
	h.Write(payload)
	return h.Sum64()
}

// WindowCap returns the dedup window's fixed capacity.
func (c *MQTTCursor) WindowCap() int { return len(c.ring) }

// WindowLen returns how many message ids the window holds (≤ WindowCap).
func (c *MQTTCursor) WindowLen() int { return c.n }

// RetainedCap returns the retained map's fixed capacity.
func (c *MQTTCursor) RetainedCap() int { return c.retainedCap }

// RetainedLen returns how many entries the retained map holds: topics
// and the dead-lettered retained payloads ObserveRetainedDeadLetter
// records.
func (c *MQTTCursor) RetainedLen() int { return len(c.retained) }

// Seen reports whether id is in the dedup window, without changing it.
func (c *MQTTCursor) Seen(id uint64) bool {
	_, ok := c.set[id]
	return ok
}

// Observe records that the message with this id and packet id is being
// applied. It returns true, changing nothing, when id is already in the
// window (a redelivery: the caller must skip it). Otherwise it adds id,
// evicting the oldest-inserted id if the window is full, sets LastPacketID
// and returns false.
func (c *MQTTCursor) Observe(id uint64, packetID uint16) (duplicate bool) {
	if _, ok := c.set[id]; ok {
		return true
	}
	capacity := len(c.ring)
	if c.n == capacity {
		delete(c.set, c.ring[c.head])
		c.ring[c.head] = id
		c.head = (c.head + 1) % capacity
	} else {
		c.ring[(c.head+c.n)%capacity] = id
		c.n++
	}
	c.set[id] = struct{}{}
	c.LastPacketID = packetID
	return false
}

// RetainedSeq returns the last sequence recorded for a retained topic.
func (c *MQTTCursor) RetainedSeq(topic string) (seq uint64, ok bool) {
	e, ok := c.retained[topic]
	if !ok {
		return 0, false
	}
	return e.Value.(*retainedEntry).seq, true
}

// ObserveRetained records a retained message with sequence seq (a sequence
// number or timestamp the caller takes from the message) on topic. It
// returns true, changing nothing, when seq is not above the sequence
// already recorded for topic: the caller must skip the message. Otherwise
// it records seq, evicting the least recently advanced topic if the map is
// full, and returns false.
func (c *MQTTCursor) ObserveRetained(topic string, seq uint64) (stale bool) {
	if e, ok := c.retained[topic]; ok {
		ent := e.Value.(*retainedEntry)
		if seq <= ent.seq {
			return true
		}
		ent.seq = seq
		c.order.MoveToBack(e)
		return false
	}
	c.pushRetained(topic, seq)
	return false
}

// deadRetainedPrefix prefixes the retained-map key under which
// ObserveRetainedDeadLetter records a topic's dead-lettered retained
// payload. MQTT forbids U+0000 in topic names, so the key is no topic's;
// the encoding is unchanged (a build without these methods parses it as
// a topic never delivered).
const deadRetainedPrefix = "\x00"

// RetainedDeadLetter returns the digest ObserveRetainedDeadLetter last
// recorded for topic.
func (c *MQTTCursor) RetainedDeadLetter(topic string) (digest uint64, ok bool) {
	return c.RetainedSeq(deadRetainedPrefix + topic)
}

// ObserveRetainedDeadLetter records that the retained message on topic
// whose payload has this digest was dead-lettered, so the copy a broker
// re-sends on every subscribe (under a new packet id, which the dedup
// window cannot match) is recognised. It replaces the topic's previous
// digest and takes a slot of the retained map like a topic, evicted the
// same way: the map stays bounded by its capacity.
func (c *MQTTCursor) ObserveRetainedDeadLetter(topic string, digest uint64) {
	key := deadRetainedPrefix + topic
	if e, ok := c.retained[key]; ok {
		e.Value.(*retainedEntry).seq = digest
		c.order.MoveToBack(e)
		return
	}
	c.pushRetained(key, digest)
}

// pushRetained adds a retained-map entry for a key it does not hold,
// evicting the least recently advanced one if the map is full.
func (c *MQTTCursor) pushRetained(key string, seq uint64) {
	if len(c.retained) == c.retainedCap {
		front := c.order.Front()
		delete(c.retained, front.Value.(*retainedEntry).topic)
		c.order.Remove(front)
	}
	c.retained[key] = c.order.PushBack(&retainedEntry{topic: key, seq: seq})
}

// Clone returns an independent copy of c.
func (c *MQTTCursor) Clone() *MQTTCursor {
	out := newMQTTCursor(len(c.ring), c.retainedCap)
	out.LastPacketID = c.LastPacketID
	copy(out.ring, c.ring)
	out.head, out.n = c.head, c.n
	for id := range c.set {
		out.set[id] = struct{}{}
	}
	for e := c.order.Front(); e != nil; e = e.Next() {
		ent := *e.Value.(*retainedEntry)
		out.retained[ent.topic] = out.order.PushBack(&ent)
	}
	return out
}

// Grown returns an independent copy of c whose capacities are at least
// windowCap and retainedCap (at most MaxMQTTWindow and MaxMQTTRetained),
// holding the same entries in the same eviction order: a cursor parsed
// from a checkpoint taken with smaller capacities, grown to the ones
// configured now.
func (c *MQTTCursor) Grown(windowCap, retainedCap int) *MQTTCursor {
	out := newMQTTCursor(min(max(windowCap, len(c.ring)), MaxMQTTWindow), min(max(retainedCap, c.retainedCap), MaxMQTTRetained))
	out.LastPacketID = c.LastPacketID
	for i := range c.n {
		id := c.ring[(c.head+i)%len(c.ring)]
		out.ring[i] = id
		out.set[id] = struct{}{}
	}
	out.n = c.n
	for e := c.order.Front(); e != nil; e = e.Next() {
		ent := *e.Value.(*retainedEntry)
		out.retained[ent.topic] = out.order.PushBack(&ent)
	}
	return out
}

// Bytes encodes c; ParseMQTTCursor reverses it, including the eviction
// order of both the window and the retained map.
func (c *MQTTCursor) Bytes() []byte {
	size := 2 + 3 + 2*binary.MaxVarintLen32 + 8*c.n + 2*binary.MaxVarintLen32
	for e := c.order.Front(); e != nil; e = e.Next() {
		size += len(e.Value.(*retainedEntry).topic) + 2*binary.MaxVarintLen64
	}
	b := make([]byte, 0, size)
	b = append(b, 'M', mqttCursorVersion)
	b = binary.AppendUvarint(b, uint64(c.LastPacketID))
	b = binary.AppendUvarint(b, uint64(len(c.ring)))
	b = binary.AppendUvarint(b, uint64(c.n))
	for i := range c.n {
		b = binary.LittleEndian.AppendUint64(b, c.ring[(c.head+i)%len(c.ring)])
	}
	b = binary.AppendUvarint(b, uint64(c.retainedCap))
	b = binary.AppendUvarint(b, uint64(len(c.retained)))
	for e := c.order.Front(); e != nil; e = e.Next() {
		ent := e.Value.(*retainedEntry)
		b = wire.AppendString(b, ent.topic)
		b = binary.AppendUvarint(b, ent.seq)
	}
	return b
}

// NewestRetainedSeq returns the highest sequence the retained map holds
// (the mqtt source records each processed message's timestamp there, so
// this is the newest one applied, unless its topic was evicted since);
// ok is false when the map is empty.
func (c *MQTTCursor) NewestRetainedSeq() (seq uint64, ok bool) {
	for e := c.order.Front(); e != nil; e = e.Next() {
		if ent := e.Value.(*retainedEntry); !strings.HasPrefix(ent.topic, deadRetainedPrefix) {
			seq, ok = max(seq, ent.seq), true
		}
	}
	return seq, ok
}

// String summarises c for logs, e.g.
// "mqtt last-packet=17 window=40/1024 retained=3/4096".
func (c *MQTTCursor) String() string {
	return fmt.Sprintf("mqtt last-packet=%d window=%d/%d retained=%d/%d", c.LastPacketID, c.n, len(c.ring), len(c.retained), c.retainedCap)
}

// ParseMQTTCursor decodes MQTTCursor.Bytes. Malformed bytes, capacities
// outside the allowed range, more entries than capacity and repeated ids or
// topics are refused with an error wrapping ErrCorrupt.
func ParseMQTTCursor(b []byte) (*MQTTCursor, error) {
	fail := func(format string, args ...any) (*MQTTCursor, error) {
		return nil, fmt.Errorf("mqtt cursor: "+format+": %w", append(args, ErrCorrupt)...)
	}
	if len(b) < 2 || b[0] != 'M' {
		return fail("%d bytes do not start with the 'M' tag", len(b))
	}
	if b[1] != mqttCursorVersion {
		return fail("encoding version %d, this build reads %d", b[1], mqttCursorVersion)
	}
	r := wire.Reader{B: b, Off: 2}
	last := r.Uvarint()
	wcap := r.Uvarint()
	n := r.Uvarint()
	if r.Err != nil {
		return fail("%v", r.Err)
	}
	if last > 1<<16-1 {
		return fail("last packet id %d exceeds 65535", last)
	}
	if wcap < 1 || wcap > MaxMQTTWindow {
		return fail("dedup window capacity %d is outside 1..%d", wcap, MaxMQTTWindow)
	}
	if n > wcap {
		return fail("dedup window holds %d ids, more than its capacity %d", n, wcap)
	}
	if n*8 > uint64(len(b)-r.Off) {
		return fail("dedup window of %d ids runs past the end (%d bytes left)", n, len(b)-r.Off)
	}
	// The ring is allocated at its full capacity, at most MaxMQTTWindow
	// ids (512 KiB): bounded whatever the input claims.
	c := newMQTTCursor(int(wcap), 1)
	c.LastPacketID = uint16(last)
	for i := range int(n) {
		id := binary.LittleEndian.Uint64(b[r.Off:])
		r.Off += 8
		if _, dup := c.set[id]; dup {
			return fail("dedup window repeats id %016x at position %d", id, i)
		}
		c.ring[i] = id
		c.set[id] = struct{}{}
	}
	c.n = int(n)
	rcap := r.Uvarint()
	m := r.Uvarint()
	if r.Err != nil {
		return fail("%v", r.Err)
	}
	if rcap < 1 || rcap > MaxMQTTRetained {
		return fail("retained map capacity %d is outside 1..%d", rcap, MaxMQTTRetained)
	}
	if m > rcap {
		return fail("retained map holds %d topics, more than its capacity %d", m, rcap)
	}
	if m*2 > uint64(len(b)-r.Off) {
		return fail("retained map of %d topics runs past the end (%d bytes left)", m, len(b)-r.Off)
	}
	c.retainedCap = int(rcap)
	for i := range int(m) {
		topic := r.Str()
		seq := r.Uvarint()
		if r.Err != nil {
			return fail("retained topic %d: %v", i, r.Err)
		}
		if _, dup := c.retained[topic]; dup {
			return fail("retained map repeats topic %q", topic)
		}
		c.retained[topic] = c.order.PushBack(&retainedEntry{topic: topic, seq: seq})
	}
	if r.Off != len(b) {
		return fail("%d trailing bytes", len(b)-r.Off)
	}
	return c, nil
}
