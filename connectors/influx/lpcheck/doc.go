// Package lpcheck checks the line protocol connectors/influx writes
// against InfluxDB 1.8's own parser (the models package of
// github.com/influxdata/influxdb v1.8.10, the version tools/influxd
// builds): every point AppendLine accepts must parse, one line per point,
// and read back with the same measurement, tags, field keys, values and
// timestamp. FuzzAppendLine is the fuzz target; its seed corpus runs with
// the normal tests.
//
// It is a module of its own so that the main module does not require
// influxdb v1.8.10: that module predates module graph pruning, so a
// requirement on it (even from a test) would add its whole dependency
// graph — some 330 go.sum lines — to the graph of tflo and of every
// module that imports tflo. The main module checks the same encoder end
// to end against a real influxd instead (TestSinkTagRoundTrip in
// connectors/influx). Run it with
//
//	cd connectors/influx/lpcheck && go test -race ./...
//	cd connectors/influx/lpcheck && go test -run x -fuzz FuzzAppendLine -fuzztime 60s
package lpcheck
