package pipeline

import (
	"sync"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/fintech"
	"github.com/tflo-io/tflo/streaming/ops"
)

var (
	defaultOnce sync.Once
	defaultReg  *streaming.Registry
)

// DefaultRegistry returns the registry of tflo's operator catalogs
// (streaming/ops and streaming/fintech), which specs resolve type names
// against unless told otherwise. It is shared: register your own operator
// types in it at init, or build a registry of your own with
// NewRegistry.
func DefaultRegistry() *streaming.Registry {
	defaultOnce.Do(func() { defaultReg = NewRegistry() })
	return defaultReg
}

// NewRegistry returns a new registry holding tflo's operator catalogs.
func NewRegistry() *streaming.Registry {
	r := streaming.NewRegistry()
	if err := ops.Register(r); err != nil {
		panic(err) // the catalogs' names are fixed and distinct: a bug
	}
	if err := fintech.Register(r); err != nil {
		panic(err)
	}
	return r
}
