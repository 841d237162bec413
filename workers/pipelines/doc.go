// Package pipelines holds the example pipelines as YAML specs (run them
// with workers/cmd/worker --pipeline FILE.yaml) and the tests that pin
// what they compute.
package pipelines
