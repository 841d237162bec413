package mqtt

import (
	"encoding/binary"
	"errors"
)

// dedupCursor is the source's view of its stream position: a bounded
// window of recently processed (packet id, digest) pairs and a bounded map
// of topic -> last processed sequence (the reading's ts).
//
// TEMPORARY: replaced by streaming.MqttCursor once it lands.
type dedupCursor struct {
	cap    int
	ring   []pktKey
	head   int // next slot to overwrite once full
	set    map[pktKey]struct{}
	last   uint16
	rcap   int
	topics map[string]int64
	order  []string // insertion order of topics, ring of rcap
	rhead  int
}

type pktKey struct {
	id     uint16
	digest uint64
}

func newDedupCursor(window, retained int, b []byte) (*dedupCursor, error) {
	c := &dedupCursor{cap: window, set: make(map[pktKey]struct{}, window), rcap: retained, topics: make(map[string]int64)}
	if len(b) > 0 {
		return nil, errors.New("restore not supported yet")
	}
	return c, nil
}

func (c *dedupCursor) seen(id uint16, digest uint64) bool {
	_, ok := c.set[pktKey{id, digest}]
	return ok
}

func (c *dedupCursor) mark(id uint16, digest uint64) {
	k := pktKey{id, digest}
	c.last = id
	if _, ok := c.set[k]; ok {
		return
	}
	if len(c.ring) < c.cap {
		c.ring = append(c.ring, k)
	} else {
		delete(c.set, c.ring[c.head])
		c.ring[c.head] = k
		c.head = (c.head + 1) % c.cap
	}
	c.set[k] = struct{}{}
}

func (c *dedupCursor) retainedSeen(topic string, seq int64) bool {
	last, ok := c.topics[topic]
	return ok && seq <= last
}

func (c *dedupCursor) markTopic(topic string, seq int64) {
	if last, ok := c.topics[topic]; ok {
		if seq > last {
			c.topics[topic] = seq
		}
		return
	}
	if len(c.order) < c.rcap {
		c.order = append(c.order, topic)
	} else {
		delete(c.topics, c.order[c.rhead])
		c.order[c.rhead] = topic
		c.rhead = (c.rhead + 1) % c.rcap
	}
	c.topics[topic] = seq
}

func (c *dedupCursor) bytes() []byte {
	return binary.AppendUvarint(nil, uint64(c.last))
}

func (c *dedupCursor) sizes() (window, windowCap, retained, retainedCap int) {
	return len(c.set), c.cap, len(c.topics), c.rcap
}
