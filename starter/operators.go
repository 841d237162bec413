package main

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tflo-io/tflo/pipeline"
	"github.com/tflo-io/tflo/streaming"
)

func (a *app) operatorsCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "operators [TYPE...]",
		Short: "List the operator types a pipeline spec's graph nodes can use, with their parameters",
		Long: `List the operator types of tflo's catalogs (pipeline.DefaultRegistry: streaming/ops
and streaming/fintech): what a graph node's "type" names in a pipeline spec, its
inputs, what it emits, its modes and its "params" with kinds, defaults, bounds and
allowed values. With TYPE, only those. -o json|yaml (or --json) prints the same
as data.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, names []string) error {
			reg := pipeline.DefaultRegistry()
			types := reg.Types()
			if len(names) > 0 {
				types = types[:0]
				for _, n := range names {
					t, ok := reg.Lookup(n)
					if !ok {
						return usageError{fmt.Errorf("unknown operator type %q (starter operators lists them)", n)}
					}
					types = append(types, t)
				}
			}
			return a.emit(types, func(w io.Writer) { printOperators(w, types) })
		},
	}
}

// printOperators writes each type as a block: name and doc, inputs,
// output, modes, then a table of parameters.
func printOperators(w io.Writer, types []streaming.OperatorType) {
	for i, t := range types {
		if i > 0 {
			fmt.Fprintln(w)
		}
		fmt.Fprintf(w, "%s — %s\n", t.Name, t.Doc)
		in := fmt.Sprintf("%d", t.MinInputs)
		switch {
		case t.MaxInputs < 0:
			in += " or more"
		case t.MaxInputs != t.MinInputs:
			in += fmt.Sprintf(" to %d", t.MaxInputs)
		}
		if t.Inputs != "" {
			in += ": " + t.Inputs
		}
		fmt.Fprintf(w, "  inputs:  %s\n", in)
		fmt.Fprintf(w, "  output:  %s\n", t.Output)
		if len(t.Modes) > 0 {
			modes := make([]streaming.Mode, 0, len(t.Modes))
			for m := range t.Modes {
				modes = append(modes, m)
			}
			slices.Sort(modes)
			var s []string
			for _, m := range modes {
				s = append(s, fmt.Sprintf("%s (%d)", t.Modes[m], m))
			}
			fmt.Fprintf(w, "  modes:   %s\n", strings.Join(s, ", "))
		}
		if len(t.Params) == 0 {
			continue
		}
		fmt.Fprintln(w, "  params:")
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		for _, p := range t.Params {
			fmt.Fprintf(tw, "    %s\t%s\t%s\t%s\n", p.Name, p.Kind, paramRange(p), p.Doc)
		}
		tw.Flush()
	}
}

// paramRange is a parameter's default and allowed values, in one cell.
func paramRange(p streaming.Param) string {
	var s []string
	if p.Default != nil {
		s = append(s, fmt.Sprintf("default %v", p.Default))
	} else {
		s = append(s, "required")
	}
	if len(p.Enum) > 0 {
		s = append(s, strings.Join(p.Enum, "|"))
	}
	f := func(v *float64) string { return strconv.FormatFloat(*v, 'f', -1, 64) }
	switch {
	case p.Min != nil && p.Max != nil:
		s = append(s, fmt.Sprintf("[%s, %s]", f(p.Min), f(p.Max)))
	case p.Min != nil:
		s = append(s, "≥ "+f(p.Min))
	case p.Max != nil:
		s = append(s, "≤ "+f(p.Max))
	}
	return strings.Join(s, ", ")
}
