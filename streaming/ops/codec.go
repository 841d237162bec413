package ops

import "github.com/tflo-io/tflo/streaming/internal/opstate"

// State blobs use the shared toolkit in streaming/internal/opstate (see its
// package doc for the encoding); these short names keep operator code terse.

func putU(dst []byte, v uint64) []byte  { return opstate.PutU(dst, v) }
func putF(dst []byte, v float64) []byte { return opstate.PutF(dst, v) }
func putB(dst []byte, v bool) []byte    { return opstate.PutB(dst, v) }
func putI(dst []byte, v int64) []byte   { return opstate.PutI(dst, v) }

// mismatch is the error for a blob saved by a node configured differently.
func mismatch(op, what string, saved, configured any) error {
	return opstate.Mismatch(op, what, saved, configured)
}

// finiteIn reports whether v can enter an operator's state (not NaN or ±Inf).
func finiteIn(v float64) bool { return opstate.FiniteIn(v) }
