package streaming

import "iter"

// Signal is a typed output of a flow: which key it concerns, its event
// time, a discrete Mode (alarm on/off, cross up/down — any comparable type
// the caller defines) and a Payload.
type Signal[M comparable, P any] struct {
	Key     string
	TS      int64
	Mode    M
	Payload P
}

// Binding tells Flow how to read a record R and how to turn a key's graph
// outputs into a typed signal.
type Binding[R any, M comparable, P any] struct {
	// Key selects the per-key instance for r.
	Key func(r R) string
	// Inputs writes r's graph inputs into dst (len(dst) == number of graph
	// inputs, in declaration order) and returns r's event time.
	Inputs func(r R, dst []Computed) (ts int64)
	// Signal turns the instance's state after r into a signal; false means
	// r produces no signal.
	Signal func(key string, ts int64, out *Instance) (Signal[M, P], bool)
}

// Flow runs records through one instance of g per key and yields the typed
// signals b.Signal makes: the Go form of `records.tflo(graph)`. Instances
// live for the iteration; use Keyed directly to keep state across calls.
//
// Flow is lazy: it pulls a record only when the consumer asks for the next
// signal, so a slow consumer slows the source (back-pressure) and no queue
// grows between them.
func Flow[R any, M comparable, P any](records iter.Seq[R], g *Graph, b Binding[R, M, P]) iter.Seq[Signal[M, P]] {
	return func(yield func(Signal[M, P]) bool) {
		keyed := NewKeyed[string](g)
		inputs := make([]Computed, len(g.inputs))
		for r := range records {
			key := b.Key(r)
			clear(inputs)
			ts := b.Inputs(r, inputs)
			in := keyed.Eval(key, ts, inputs...)
			if s, ok := b.Signal(key, ts, in); ok {
				if !yield(s) {
					return
				}
			}
		}
	}
}

// FlowFunc is the closure form of Flow: step maps each record to at most
// one output and may keep its own state in the closure.
func FlowFunc[R, S any](records iter.Seq[R], step func(R) (S, bool)) iter.Seq[S] {
	return func(yield func(S) bool) {
		for r := range records {
			if s, ok := step(r); ok {
				if !yield(s) {
					return
				}
			}
		}
	}
}
