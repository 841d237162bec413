package streaming

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// PrintOperatorTypes writes each type as a block: name and doc, inputs,
// output, modes, then a table of parameters (what `starter operators`
// and `worker --operators` print).
func PrintOperatorTypes(w io.Writer, types []OperatorType) {
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
			modes := make([]Mode, 0, len(t.Modes))
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
func paramRange(p Param) string {
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
