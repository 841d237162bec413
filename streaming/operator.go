package streaming

// Operator is a node of a graph. The runtime creates one Operator value per
// key (through the factory given to [Builder.Node]) and calls it from the
// key's owning goroutine only, so implementations need no locks.
//
// Call order: Eval once per record of the key, in record order. Save may be
// called between two Evals (a checkpoint); Load is called before the first
// Eval after a restore, never concurrently with Eval. Reset returns the
// operator to its just-constructed state.
type Operator interface {
	// Eval consumes this record's inputs (one per wired input, in wiring
	// order) at event time ts and returns the node's output, or NoOutput().
	// inputs is owned by the runtime, only valid during the call, and must
	// not be modified (it may alias the graph's value slots).
	//
	// Non-finite values never enter an operator's state: an input that is
	// NaN or ±Inf, or that would make the state non-finite (a sum that
	// overflows), is refused — the state stays as it was and Eval returns
	// Rejected(), which the runtime counts per record (Instance.Rejected)
	// and which downstream is None. So Save never writes a NaN or ±Inf and
	// Load can refuse one as corrupt. Outputs are finite too: an output
	// that would overflow is not emitted (NoOutput).
	Eval(inputs []Computed, ts int64) NodeOutput
	// Reset drops all state.
	Reset()
	// Name is the operator's type name ("sma", "hysteresis"), used in state
	// blobs and error messages. It names the kind, not the node.
	Name() string
	// Save returns the operator's state; nil means nothing to save. The
	// returned slice is owned by the caller.
	Save() ([]byte, error)
	// Load replaces the operator's state with one produced by Save of the
	// same TypeVersion (the runtime migrates older versions first, see
	// Migrator). It returns an *OperatorLoadError on a blob it cannot read.
	// Load does not retain data.
	Load(data []byte) error
	// TypeVersion is the version of the Save format. Bump it whenever the
	// format changes and implement Migrator to read older blobs.
	TypeVersion() uint32
}

// StatelessOperator marks an operator that keeps no state between records,
// a declared intent the runtime uses to skip it when saving.
type StatelessOperator interface {
	Operator
	Stateless()
}

// Migrator is an optional capability of an Operator: it converts state
// saved by an older TypeVersion to the current one. Without it, loading a
// blob of another version fails with a *VersionError — never a silent reset.
type Migrator interface {
	// MigratesFrom lists the older versions Migrate accepts.
	MigratesFrom() []uint32
	// Migrate converts data saved at version from to the current version.
	Migrate(from uint32, data []byte) ([]byte, error)
}

// Arity is an optional capability an Operator implements to have its
// number of inputs checked when the graph is built. Max < 0 means no upper
// bound.
type Arity interface {
	Arity() (min, max int)
}

// PartialInputs is an optional capability: an operator that implements it
// is evaluated even when some of its inputs did not emit for the record
// (they arrive as None). By default such a node is skipped.
type PartialInputs interface {
	AcceptsPartialInputs()
}

// Base gives an Operator the contract's defaults: no state, version 0,
// Reset does nothing. Embed it and override what the operator needs.
//
//	type Doubler struct{ streaming.Base }
//	func (Doubler) Name() string { return "doubler" }
//	func (Doubler) Eval(in []streaming.Computed, _ int64) streaming.NodeOutput {
//		return streaming.Float(2 * in[0].Float64())
//	}
type Base struct{}

// Reset does nothing.
func (Base) Reset() {}

// Name returns "operator".
func (Base) Name() string { return "operator" }

// Save returns nil: nothing to save.
func (Base) Save() ([]byte, error) { return nil, nil }

// Load accepts an empty blob and refuses anything else, since an operator
// that does not override Load has no state to put it in.
func (Base) Load(data []byte) error {
	if len(data) == 0 {
		return nil
	}
	return &OperatorLoadError{Operator: "operator", Reason: "has no state but was given a non-empty blob"}
}

// TypeVersion returns 0.
func (Base) TypeVersion() uint32 { return 0 }

// StatelessBase is Base plus the StatelessOperator marker.
type StatelessBase struct{ Base }

// Stateless marks the operator as keeping no state.
func (StatelessBase) Stateless() {}
