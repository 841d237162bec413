package streaming

import "iter"

// Keyed holds one Instance of a Graph per key, created on first sight of
// the key. It keeps every instance in memory; for working sets larger than
// memory, streaming/keyedstate offers a bounded cache backed by Badger
// (streaming/state/badger is a StateStore, not a keyed runtime).
// Owned by one goroutine.
type Keyed[K comparable] struct {
	g *Graph
	m map[K]*Instance
}

// NewKeyed returns an empty Keyed over g.
func NewKeyed[K comparable](g *Graph) *Keyed[K] {
	return &Keyed[K]{g: g, m: make(map[K]*Instance)}
}

// Graph returns the template graph.
func (k *Keyed[K]) Graph() *Graph { return k.g }

// Instance returns key's instance, creating it on first sight.
func (k *Keyed[K]) Instance(key K) *Instance {
	in, ok := k.m[key]
	if !ok {
		in = k.g.NewInstance()
		k.m[key] = in
	}
	return in
}

// Lookup returns key's instance without creating one.
func (k *Keyed[K]) Lookup(key K) (*Instance, bool) {
	in, ok := k.m[key]
	return in, ok
}

// Eval runs one record of key through its instance and returns the
// instance so the caller can read its outputs.
func (k *Keyed[K]) Eval(key K, ts int64, inputs ...Computed) *Instance {
	in := k.Instance(key)
	in.Eval(ts, inputs...)
	return in
}

// Len returns the number of keys seen.
func (k *Keyed[K]) Len() int { return len(k.m) }

// Delete forgets key and its state.
func (k *Keyed[K]) Delete(key K) { delete(k.m, key) }

// All iterates keys and instances in no particular order.
func (k *Keyed[K]) All() iter.Seq2[K, *Instance] {
	return func(yield func(K, *Instance) bool) {
		for key, in := range k.m {
			if !yield(key, in) {
				return
			}
		}
	}
}
