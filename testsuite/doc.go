// Package testsuite is the test harness shared by tflo's tests: embedded
// services, conformance suites every backend runs (statetest, coordtest),
// fault injectors and end-to-end tests.
package testsuite
