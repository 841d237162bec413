package streaming

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Builder wires operators into a graph by stable node names (the names are
// the identity of each node's state, like Flink's operator uid: renaming a
// node orphans its saved state). Build validates the wiring.
//
//	g, err := streaming.NewBuilder().
//		Input("value").
//		Node("smooth", func() streaming.Operator { return ops.NewSMA(5) }, "value").
//		Node("alarm", func() streaming.Operator { return ops.NewHysteresis(20, 25) }, "smooth").
//		Output("smooth", "alarm").
//		Build()
type Builder struct {
	inputs  []string
	nodes   []nodeSpec
	outputs []string
}

type nodeSpec struct {
	name    string
	factory func() Operator
	inputs  []string
}

// NewBuilder returns an empty Builder.
func NewBuilder() *Builder { return &Builder{} }

// Input declares the graph's source inputs, in the order records supply
// them to Instance.Eval.
func (b *Builder) Input(names ...string) *Builder {
	b.inputs = append(b.inputs, names...)
	return b
}

// Node adds an operator node fed by the named inputs or nodes, in order.
// factory is called once per key to make that key's operator.
func (b *Builder) Node(name string, factory func() Operator, inputs ...string) *Builder {
	b.nodes = append(b.nodes, nodeSpec{name: name, factory: factory, inputs: slices.Clone(inputs)})
	return b
}

// Output declares which nodes (or inputs) are the graph's outputs, in the
// order Instance.Output indexes them. Without Output, every node that feeds
// no other node is an output, in evaluation order (Graph.Operators': a
// node after every node it reads, declaration order otherwise), which
// differs from declaration order when a node is declared before one it
// reads.
func (b *Builder) Output(names ...string) *Builder {
	b.outputs = append(b.outputs, names...)
	return b
}

// Build validates the wiring — unique names, known inputs, no cycles,
// operator arity, outputs declared once — and returns the immutable Graph. Errors are
// *GraphError values naming the node at fault.
func (b *Builder) Build() (*Graph, error) {
	if len(b.nodes) == 0 {
		return nil, &GraphError{Reason: "no nodes"}
	}
	names := make(map[string]int, len(b.inputs)+len(b.nodes)) // name -> spec index (-1 - input index for inputs)
	for i, in := range b.inputs {
		if in == "" {
			return nil, &GraphError{Reason: fmt.Sprintf("input %d has an empty name", i)}
		}
		if _, dup := names[in]; dup {
			return nil, &GraphError{Node: in, Reason: "input declared twice"}
		}
		names[in] = -1 - i
	}
	for i, n := range b.nodes {
		if n.name == "" {
			return nil, &GraphError{Reason: fmt.Sprintf("node %d has an empty name", i)}
		}
		if _, dup := names[n.name]; dup {
			return nil, &GraphError{Node: n.name, Reason: "name already used by another node or input"}
		}
		if n.factory == nil {
			return nil, &GraphError{Node: n.name, Reason: "nil operator factory"}
		}
		names[n.name] = i
	}
	for _, n := range b.nodes {
		if len(n.inputs) == 0 {
			return nil, &GraphError{Node: n.name, Reason: "has no inputs"}
		}
		for _, in := range n.inputs {
			if _, ok := names[in]; !ok {
				return nil, &GraphError{Node: n.name, Reason: fmt.Sprintf("unknown input %q", in)}
			}
		}
	}

	// Topological order (Kahn), stable in declaration order.
	indeg := make([]int, len(b.nodes))
	consumers := make([][]int, len(b.nodes))
	for i, n := range b.nodes {
		for _, in := range n.inputs {
			if j := names[in]; j >= 0 {
				indeg[i]++
				consumers[j] = append(consumers[j], i)
			}
		}
	}
	order := make([]int, 0, len(b.nodes))
	ready := make([]int, 0, len(b.nodes))
	for i := range b.nodes {
		if indeg[i] == 0 {
			ready = append(ready, i)
		}
	}
	for len(ready) > 0 {
		slices.Sort(ready)
		i := ready[0]
		ready = ready[1:]
		order = append(order, i)
		for _, c := range consumers[i] {
			indeg[c]--
			if indeg[c] == 0 {
				ready = append(ready, c)
			}
		}
	}
	if len(order) != len(b.nodes) {
		// The nodes left are on a cycle or downstream of one: name the
		// first declared that is on one, and its cycle.
		for i := range b.nodes {
			if indeg[i] == 0 {
				continue
			}
			if c := cycleThrough(i, consumers); c != nil {
				path := make([]string, 0, len(c)+1)
				for _, j := range c {
					path = append(path, strconv.Quote(b.nodes[j].name))
				}
				path = append(path, strconv.Quote(b.nodes[i].name))
				return nil, &GraphError{Node: b.nodes[i].name, Reason: "is part of a cycle: " + strings.Join(path, " -> ")}
			}
		}
	}

	g := &Graph{inputs: slices.Clone(b.inputs), byName: make(map[string]int)}
	for i, in := range b.inputs {
		g.slotNames = append(g.slotNames, in)
		g.byName[in] = i
	}
	slotOf := func(name string) int { return g.byName[name] }
	for _, i := range order {
		spec := b.nodes[i]
		op := spec.factory()
		if op == nil {
			return nil, &GraphError{Node: spec.name, Reason: "operator factory returned nil"}
		}
		if a, ok := op.(Arity); ok {
			lo, hi := a.Arity()
			if len(spec.inputs) < lo || (hi >= 0 && len(spec.inputs) > hi) {
				want := fmt.Sprintf("%d", lo)
				if hi < 0 {
					want = fmt.Sprintf("at least %d", lo)
				} else if hi != lo {
					want = fmt.Sprintf("%d to %d", lo, hi)
				}
				noun := "inputs"
				if lo == 1 && hi == 1 {
					noun = "input"
				}
				return nil, &GraphError{Node: spec.name, Reason: fmt.Sprintf("operator %q takes %s %s, wired with %d", op.Name(), want, noun, len(spec.inputs))}
			}
		}
		n := node{
			name:    spec.name,
			factory: spec.factory,
			slot:    len(g.slotNames),
			opName:  op.Name(),
			version: op.TypeVersion(),
		}
		_, n.stateless = op.(StatelessOperator)
		_, n.partial = op.(PartialInputs)
		for _, in := range spec.inputs {
			n.in = append(n.in, slotOf(in))
		}
		if len(n.in) > g.maxArity {
			g.maxArity = len(n.in)
		}
		g.byName[spec.name] = n.slot
		g.slotNames = append(g.slotNames, spec.name)
		g.nodes = append(g.nodes, n)
	}

	outs := b.outputs
	if len(outs) == 0 {
		for _, i := range order {
			if len(consumers[i]) == 0 {
				outs = append(outs, b.nodes[i].name)
			}
		}
	}
	for i, o := range outs {
		s, ok := g.byName[o]
		if !ok {
			return nil, &GraphError{Node: o, Reason: "declared as output but not defined"}
		}
		if slices.Contains(outs[:i], o) {
			return nil, &GraphError{Node: o, Reason: "declared as output twice: its values would be written twice"}
		}
		g.outputs = append(g.outputs, s)
		g.outputNames = append(g.outputNames, o)
	}
	return g, nil
}

// Graph is a validated, immutable operator DAG. It is a template: each key
// evaluates its own Instance. A Graph is safe for concurrent use.
type Graph struct {
	inputs      []string
	nodes       []node // topological order
	slotNames   []string
	byName      map[string]int // name -> slot
	outputs     []int          // slots
	outputNames []string
	maxArity    int
}

type node struct {
	name      string
	factory   func() Operator
	in        []int
	slot      int
	opName    string
	version   uint32
	stateless bool
	partial   bool
}

// Inputs returns the graph's input names in Eval order.
func (g *Graph) Inputs() []string { return slices.Clone(g.inputs) }

// Outputs returns the graph's output names in Output order.
func (g *Graph) Outputs() []string { return slices.Clone(g.outputNames) }

// OperatorInfo describes one node for snapshot metadata and diagnostics.
type OperatorInfo struct {
	Node        string `json:"node"`
	Operator    string `json:"operator"`
	TypeVersion uint32 `json:"type_version"`
}

// Operators describes the graph's nodes in evaluation order.
func (g *Graph) Operators() []OperatorInfo {
	out := make([]OperatorInfo, len(g.nodes))
	for i, n := range g.nodes {
		out[i] = OperatorInfo{Node: n.name, Operator: n.opName, TypeVersion: n.version}
	}
	return out
}

// statefulOperators describes the nodes that keep state, in evaluation
// order: what a snapshot of g records (WithGraph).
func (g *Graph) statefulOperators() []OperatorInfo {
	var out []OperatorInfo
	for _, n := range g.nodes {
		if !n.stateless {
			out = append(out, OperatorInfo{Node: n.name, Operator: n.opName, TypeVersion: n.version})
		}
	}
	return out
}

// NewInstance returns a fresh per-key instance of g.
func (g *Graph) NewInstance() *Instance {
	in := &Instance{
		g:       g,
		ops:     make([]Operator, len(g.nodes)),
		vals:    make([]Computed, len(g.slotNames)),
		scratch: make([]Computed, g.maxArity),
	}
	for i, n := range g.nodes {
		in.ops[i] = n.factory()
	}
	return in
}

// Instance is one key's copy of a Graph: its operators and their state,
// and the values the last record produced. Owned by one goroutine.
type Instance struct {
	g        *Graph
	ops      []Operator
	vals     []Computed
	scratch  []Computed
	rejected int // nodes that returned Rejected for the last record
}

// Graph returns the template this instance was made from.
func (in *Instance) Graph() *Graph { return in.g }

// Eval runs one record through the instance: inputs are the graph inputs in
// declaration order (missing trailing inputs are None), ts its event time.
// It does not allocate. Nodes that return Rejected are counted (see
// Rejected) and their output is None.
func (in *Instance) Eval(ts int64, inputs ...Computed) {
	in.rejected = 0
	vals := in.vals
	nIn := len(in.g.inputs)
	n := min(len(inputs), nIn)
	for i := 0; i < n; i++ { // a loop, not copy: no memmove call for 1–3 values
		vals[i] = inputs[i]
	}
	for i := n; i < nIn; i++ {
		vals[i] = Computed{}
	}
	nodes := in.g.nodes
	for i := range nodes {
		nd := &nodes[i]
		var args []Computed
		if len(nd.in) == 1 {
			// Single-input nodes read their input in place (operators must
			// not modify inputs), saving the copy into scratch.
			s := nd.in[0]
			if vals[s].kind == KindNone && !nd.partial {
				vals[nd.slot] = Computed{}
				continue
			}
			args = vals[s : s+1 : s+1]
		} else {
			args = in.scratch[:len(nd.in)]
			skip := false
			for j, s := range nd.in {
				v := vals[s]
				if v.kind == KindNone && !nd.partial {
					skip = true
					break
				}
				args[j] = v
			}
			if skip {
				vals[nd.slot] = Computed{}
				continue
			}
		}
		out := in.ops[i].Eval(args, ts)
		if out.kind == KindNone && out.bits != 0 {
			in.rejected++
			out = Computed{}
		}
		vals[nd.slot] = out
	}
}

// Rejected returns how many nodes refused the last record's input (they
// returned Rejected: a NaN, ±Inf or state-overflowing value), 0 when
// every node took it. Runtimes count records with Rejected() > 0.
func (in *Instance) Rejected() int { return in.rejected }

// Output returns the i-th declared output of the last Eval (None when that
// node did not emit).
func (in *Instance) Output(i int) Computed { return in.vals[in.g.outputs[i]] }

// NumOutputs returns the number of declared outputs.
func (in *Instance) NumOutputs() int { return len(in.g.outputs) }

// Value returns the last value of the named node or input, and false when
// the graph has no such name.
func (in *Instance) Value(name string) (Computed, bool) {
	s, ok := in.g.byName[name]
	if !ok {
		return Computed{}, false
	}
	return in.vals[s], true
}

// Operator returns the named node's operator (for inspection in tests and
// tools), or nil.
func (in *Instance) Operator(node string) Operator {
	for i, n := range in.g.nodes {
		if n.name == node {
			return in.ops[i]
		}
	}
	return nil
}

// Reset drops the state of every operator.
func (in *Instance) Reset() {
	for _, op := range in.ops {
		op.Reset()
	}
	clear(in.vals)
	in.rejected = 0
}

// cycleThrough returns the nodes of a cycle through node i, i first, in
// the direction records flow (consumers[j] are the nodes reading j), or
// nil when i is on no cycle (it only reads from one).
func cycleThrough(i int, consumers [][]int) []int {
	seen := make([]bool, len(consumers))
	var path []int
	var walk func(j int) bool
	walk = func(j int) bool {
		path = append(path, j)
		for _, c := range consumers[j] {
			if c == i {
				return true
			}
			if !seen[c] {
				seen[c] = true
				if walk(c) {
					return true
				}
			}
		}
		path = path[:len(path)-1]
		return false
	}
	if walk(i) {
		return path
	}
	return nil
}
