//go:build !linux

package keyedstate

// mapAdvisor advises nothing outside Linux (see advise_linux.go).
type mapAdvisor struct{}

func startAdvisor(...string) *mapAdvisor { return &mapAdvisor{} }

func (*mapAdvisor) close() {}
