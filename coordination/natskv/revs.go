package natskv

import (
	"sync"

	"github.com/tflo-io/tflo/coordination"
)

// valueRevsMax bounds valueRevs; when full it starts over (a miss only
// costs Update its marker read).
const valueRevsMax = 4096

// valueRevs remembers revisions this Store has seen carry a value: its own
// writes and what Get, List and Watch returned. The message at a stream
// sequence never changes, so such a revision can never be a marker and
// Update skips its marker read for it. A lease renewed with the revision
// of its previous write therefore costs one round trip, not two.
type valueRevs struct {
	mu sync.Mutex
	m  map[valueRev]struct{}
}

type valueRev struct {
	ks  coordination.Keyspace
	rev coordination.Revision
}

func (v *valueRevs) add(ks coordination.Keyspace, rev coordination.Revision) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.m == nil || len(v.m) >= valueRevsMax {
		v.m = make(map[valueRev]struct{})
	}
	v.m[valueRev{ks, rev}] = struct{}{}
}

// take reports whether rev is known to carry a value and forgets it: once
// an update at rev is tried the key has moved on or is about to.
func (v *valueRevs) take(ks coordination.Keyspace, rev coordination.Revision) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	k := valueRev{ks, rev}
	_, ok := v.m[k]
	delete(v.m, k)
	return ok
}
