package pipeline

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/tflo-io/tflo/streaming"
)

// NodeError is a graph node that cannot be built: an unknown operator
// type, a parameter its type refuses, an unknown input, a cycle. It names
// the node and, for a spec, the line that declared it.
type NodeError struct {
	Node string
	Type string // the operator type, when known
	Line int    // 0 for graphs built in Go
	Err  error
}

func (e *NodeError) Error() string {
	where := fmt.Sprintf("graph node %q", e.Node)
	if e.Line > 0 {
		where += fmt.Sprintf(" (line %d)", e.Line)
	}
	return where + ": " + e.Err.Error()
}

func (e *NodeError) Unwrap() error { return e.Err }

// compiled is a pipeline ready to run: defaults applied, validated, its
// graph built and its decoder bound to the graph's inputs.
type compiled struct {
	p     Pipeline
	g     *streaming.Graph
	dec   Decoder                              // the bound decoder, then the limits check
	modes map[string]map[streaming.Mode]string // by output name
	scale int64                                // nanoseconds per time unit
	outs  []string                             // output names, in Output order
}

// compile validates p and builds what running it needs, resolving
// operator types in reg (DefaultRegistry when nil).
func compile(p Pipeline, reg *streaming.Registry) (*compiled, error) {
	return compileSpec(p, reg, nil)
}

// compileSpec is compile locating the problems of a spec's keys with
// where (see Pipeline.validate). Every problem is reported at once: what
// validate finds, the graph's, the Kafka sinks' encoders' (once the
// graph builds) and the decoder's binding to the graph's inputs.
func compileSpec(p Pipeline, reg *streaming.Registry, where func(key string) string) (*compiled, error) {
	p = p.withDefaults()
	if reg == nil {
		reg = p.registry
	}
	if reg == nil {
		reg = DefaultRegistry()
	}
	var errs []error
	if err := p.validate(where); err != nil {
		errs = append(errs, err)
	}
	c := &compiled{p: p, scale: p.TimeUnit.Nanos()}
	// A graph of no nodes is validate's problem (graph has no nodes).
	if p.Graph.Built != nil || len(p.Graph.Nodes) > 0 {
		var err error
		outputsAt := ""
		if where != nil {
			outputsAt = where("graph.outputs")
		}
		if c.g, c.modes, err = buildGraph(p.Graph, reg, outputsAt); err != nil {
			errs = append(errs, fmt.Errorf("pipeline %q: %w", p.Name, err))
		} else {
			c.outs = c.g.Outputs()
			if err := c.checkEncoders(where); err != nil {
				errs = append(errs, err)
			}
		}
	}
	// No inputs, or a repeated one, is validate's problem (graph.inputs
	// is empty, graph input is repeated): the decoder would only be told
	// the same mistake.
	dec := p.Decoder
	if names := inputNames(p.Graph.Inputs); len(names) > 0 && len(names) == len(slices.Compact(slices.Sorted(slices.Values(names)))) {
		var err error
		if dec, err = bindDecoder(p.Decoder, inputFields(p.Graph.Inputs)); err != nil {
			errs = append(errs, fmt.Errorf("pipeline %q: decoder: %w", p.Name, err))
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	check, err := p.Limits.Compile()
	if err != nil {
		return nil, fmt.Errorf("pipeline %q: %w", p.Name, err)
	}
	c.dec = limitedDecoder{inner: dec, check: check}
	return c, nil
}

// checkEncoders builds the encoders of the Kafka sinks against the
// graph (a format, an envelope's trigger, modes and payload), as opening
// them would, so a spec's check refuses what the worker's start would.
func (c *compiled) checkEncoders(where func(key string) string) error {
	env := c.sinkEnv(nil)
	var errs []error
	for i, s := range c.p.Sinks {
		k, ok := kafkaSinkOf(s)
		if !ok {
			continue
		}
		if _, err := k.encoder(env); err != nil {
			at := ""
			if where != nil {
				at = where(fmt.Sprintf("sinks[%d]", i))
			}
			errs = append(errs, fmt.Errorf("pipeline %q: %ssinks[%d]: %w", c.p.Name, at, i, err))
		}
	}
	return errors.Join(errs...)
}

// buildGraph builds g's nodes from reg. Every node's type and parameter
// problems are reported at once; wiring problems (unknown inputs,
// cycles) name the node at fault, and a bad output where graph.outputs
// was set (outputsAt: "line 6: ", "environment TFLO_GRAPH_OUTPUTS: ", or
// "").
func buildGraph(g Graph, reg *streaming.Registry, outputsAt string) (*streaming.Graph, map[string]map[streaming.Mode]string, error) {
	modes := map[string]map[streaming.Mode]string{}
	if g.Built != nil {
		if g.Modes != nil {
			for _, o := range g.Built.Outputs() {
				modes[o] = probeModes(g.Modes, o)
			}
		}
		return g.Built, modes, nil
	}
	lines := map[string]int{}
	types := map[string]string{}
	known := map[string]bool{}
	for _, in := range g.Inputs {
		known[in.Name] = true
	}
	var errs []error
	b := streaming.NewBuilder().Input(inputNames(g.Inputs)...)
	for _, n := range g.Nodes {
		lines[n.Name], types[n.Name] = n.Line, n.Type
		fail := func(err error) { errs = append(errs, &NodeError{Node: n.Name, Type: n.Type, Line: n.Line, Err: err}) }
		if n.Name == "" {
			fail(errors.New("has no name"))
			continue
		}
		if known[n.Name] {
			fail(errors.New("name already used by another node or input"))
		}
		known[n.Name] = true
		if n.Type == "" {
			fail(errors.New("has no operator type"))
			continue
		}
		failAll := func(err error) {
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				for _, e := range j.Unwrap() { // each parameter's problem on its own line
					fail(e)
				}
			} else {
				fail(err)
			}
		}
		t, _, err := reg.Resolve(n.Type, n.Params)
		if err != nil {
			failAll(err)
			continue
		}
		f, err := reg.Factory(n.Type, n.Params)
		if err != nil {
			failAll(err) // a New may refuse several parameters at once too
			continue
		}
		if len(n.Inputs) < t.MinInputs || (t.MaxInputs >= 0 && len(n.Inputs) > t.MaxInputs) {
			noun := "inputs"
			if t.MinInputs == 1 && t.MaxInputs == 1 {
				noun = "input"
			}
			fail(fmt.Errorf("operator %q takes %s %s (%s), wired with %d", n.Type, arity(t), noun, t.Inputs, len(n.Inputs)))
		}
		if len(t.Modes) > 0 {
			modes[n.Name] = t.Modes
		}
		b.Node(n.Name, f, n.Inputs...)
	}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			if !known[in] {
				errs = append(errs, &NodeError{Node: n.Name, Type: n.Type, Line: n.Line, Err: fmt.Errorf("unknown input %q (known: %s)", in, strings.Join(slices.Sorted(keys(known)), ", "))})
			}
		}
	}
	at := outputsAt
	outs := map[string]int{}
	for _, o := range g.Outputs {
		// Once a name, however often it is repeated.
		switch outs[o]++; {
		case outs[o] == 1 && !known[o]:
			errs = append(errs, fmt.Errorf("%sgraph output %q is neither a node nor an input", at, o))
		case outs[o] == 2:
			errs = append(errs, fmt.Errorf("%sgraph output %q is repeated: its values would be written twice", at, o))
		}
	}
	if len(errs) > 0 {
		return nil, nil, errors.Join(errs...)
	}
	b.Output(g.Outputs...)
	built, err := b.Build()
	if err != nil {
		var ge *streaming.GraphError
		if errors.As(err, &ge) && ge.Node != "" {
			return nil, nil, &NodeError{Node: ge.Node, Type: types[ge.Node], Line: lines[ge.Node], Err: errors.New(ge.Reason)}
		}
		return nil, nil, err
	}
	outModes := map[string]map[streaming.Mode]string{}
	for _, o := range built.Outputs() {
		if m, ok := modes[o]; ok {
			outModes[o] = m
		}
	}
	return built, outModes, nil
}

func keys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func arity(t streaming.OperatorType) string {
	switch {
	case t.MaxInputs < 0:
		return fmt.Sprintf("at least %d", t.MinInputs)
	case t.MaxInputs == t.MinInputs:
		return strconv.Itoa(t.MinInputs)
	}
	return fmt.Sprintf("%d to %d", t.MinInputs, t.MaxInputs)
}

// probeModes lists the names a user's ModeNames gives the small modes of
// an output (Built graphs).
func probeModes(f streaming.ModeNames, output string) map[streaming.Mode]string {
	out := map[streaming.Mode]string{}
	for m := streaming.Mode(-16); m <= 16; m++ {
		if n, ok := f(output, m); ok {
			out[m] = n
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// modeNames is the ModeNames of the compiled graph's outputs.
func (c *compiled) modeNames(output string, m streaming.Mode) (string, bool) {
	names := c.modes[output]
	if names == nil {
		return "", false
	}
	if n, ok := names[m]; ok {
		return n, true
	}
	return strconv.Itoa(int(m)), true
}

// sinkEnv is what the pipeline's sinks are opened with.
func (c *compiled) sinkEnv(log *slog.Logger) SinkEnv {
	return SinkEnv{Pipeline: c.p.Name, Source: c.p.Source, TimeUnit: c.p.TimeUnit, Modes: c.modeNames,
		ModesOf: func(o string) map[streaming.Mode]string { return c.modes[o] }, Outputs: slices.Clone(c.outs), Log: log}
}

// appendOutputs appends the outputs inst emitted for one record.
func (c *compiled) appendOutputs(dst []streaming.Output, inst *streaming.Instance, rec streaming.Output) []streaming.Output {
	for i, name := range c.outs {
		v := inst.Output(i)
		if v.IsNone() {
			continue
		}
		o := rec
		o.Name, o.Value, o.Mode = name, v.Float64(), v.Mode()
		dst = append(dst, o)
	}
	return dst
}
