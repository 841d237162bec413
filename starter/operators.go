package main

import (
	"fmt"
	"io"
	"strings"

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
allowed values. With TYPE, only those (each once). -o json|yaml (or --json) prints the same
as data.`,
		Args: cobra.ArbitraryArgs,
		RunE: func(_ *cobra.Command, names []string) error {
			reg := pipeline.DefaultRegistry()
			types := reg.Types()
			if len(names) > 0 {
				types = types[:0]
				seen := map[string]bool{}
				for _, n := range names {
					if seen[n] {
						continue // "sma sma" lists sma once
					}
					seen[n] = true
					t, ok := reg.Lookup(n)
					if !ok {
						// Name what exists, as a spec's unknown type does
						// (Registry.Resolve): a typo is then plain to see.
						var known []string
						for _, t := range reg.Types() {
							known = append(known, t.Name)
						}
						return usageError{fmt.Errorf("%w %q (known: %s)", streaming.ErrUnknownOperator, n, strings.Join(known, ", "))}
					}
					types = append(types, t)
				}
			}
			return a.emit(types, func(w io.Writer) { streaming.PrintOperatorTypes(w, types) })
		},
	}
}
