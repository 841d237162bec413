// Package benchratio reports a benchmark's cost as a ratio against a
// baseline measured in the same run, so speed targets ("within 3× of a
// hand-written loop") are judged on one machine at one moment instead of
// against absolute numbers from somewhere else.
//
// Baselines are measured once per process, before any benchmark runs, by
// Main (called from the package's TestMain), only those of the benchmark
// functions -test.bench selects: testing.Benchmark cannot run
// inside a running benchmark (the testing package holds its benchmark lock
// for the whole benchmark function), so Report only reads them.
//
//	func TestMain(m *testing.M) {
//		benchratio.Main(m, benchratio.Baselines{"BenchmarkEdge": {"handloop": baselineEdge}})
//	}
//	func BenchmarkEdge(b *testing.B) {
//		for i := 0; i < b.N; i++ { ... }
//		benchratio.Report(b, "handloop", baselineEdge)
//	}
//
// Concurrency: Main runs before the tests; Report may be called from any
// benchmark.
package benchratio
