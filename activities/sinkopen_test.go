package activities_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/tflo-io/tflo/activities"
	"github.com/tflo-io/tflo/connectors/influx"
	"github.com/tflo-io/tflo/streaming"
)

// TestReplaySinkOpenFailure: a sink the resolver could not open for a
// passing reason (wrapping ErrSinkUnavailable: the worker's InfluxDB did
// not answer its CREATE DATABASE) fails the replay retryably, naming the
// sink and the reason; any other resolver error (an unknown name) fails
// it for good, as BadInput. Before, both failed the backfill for good.
func TestReplaySinkOpenFailure(t *testing.T) {
	loc, arc := writeArchive(t, 0, 0)
	shardFiles(t, arc, "iot", 0, 2, 10)
	for _, tc := range []struct {
		name      string
		err       error
		retryable bool
	}{
		{"unavailable", fmt.Errorf("%w: influx http://influx:8086: create database %q: connection refused", activities.ErrSinkUnavailable, "bf"), true},
		{"unknown", errors.New(`unknown sink kind "nope"`), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s testsuite.WorkflowTestSuite
			env := &activityEnv{s.NewTestActivityEnvironment()}
			b := &activities.Backfills{Sinks: func(string) (streaming.Sink, error) { return nil, tc.err }}
			env.RegisterActivity(b)
			var res activities.ReplayPartitionResult
			err := env.run(b.ReplayPartition, activities.ReplayPartitionInput{Location: loc, Partition: "iot/shard-000000/", Sink: "influx:bf/autogen"}, &res)
			require.Error(t, err)
			typ, nonRetryable := appErrType(t, err)
			assert.Equal(t, !tc.retryable, nonRetryable, "%v", err)
			if !tc.retryable {
				assert.Equal(t, activities.ErrTypeBadInput, typ)
			}
			assert.Contains(t, err.Error(), `sink "influx:bf/autogen"`)
			assert.Contains(t, err.Error(), tc.err.Error())
		})
	}
}

// deadSink fails every Write and Flush with err, as the Influx sink does
// once the server refused its credentials or bucket.
type deadSink struct{ err error }

func (s deadSink) Write(context.Context, []streaming.Output) error { return s.err }
func (s deadSink) Flush(context.Context, streaming.ShardID, streaming.CheckpointID) error {
	return s.err
}
func (s deadSink) Close(context.Context) error { return nil }

// TestReplaySinkFailedForGood: a sink that failed for good (Influx 401,
// 404, an untrusted certificate: streaming.ErrSinkFailed) fails the replay
// non-retryably (ErrTypeSinkFailed), with the sink's reason, whether it
// replays a partition or a file; a passing failure is retried. Before,
// every sink error was retried, and the backfill's replays (which have no
// attempt limit) retried a refused token for hours.
func TestReplaySinkFailedForGood(t *testing.T) {
	loc, _ := writeArchive(t, 2, 10)
	for _, tc := range []struct {
		name      string
		err       error
		retryable bool
	}{
		{"unauthorized", &influx.WriteError{Endpoint: "http://influx:8086", Bucket: "bf/autogen", StatusCode: 401, Message: "unauthorized", Points: 20, Attempts: 1, Err: influx.ErrUnauthorized}, false},
		{"no bucket", &influx.WriteError{Endpoint: "http://influx:8086", Bucket: "bf/autogen", StatusCode: 404, Message: "bucket not found", Points: 20, Attempts: 1, Err: influx.ErrNoBucket}, false},
		{"untrusted certificate", &influx.WriteError{Endpoint: "http://influx:8086", Bucket: "bf/autogen", Message: "x509: certificate signed by unknown authority", Points: 20, Attempts: 1, Err: influx.ErrTLS}, false},
		{"unavailable", &influx.WriteError{Endpoint: "http://influx:8086", Bucket: "bf/autogen", StatusCode: 503, Message: "unavailable", Points: 20, Attempts: 5}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s testsuite.WorkflowTestSuite
			env := &activityEnv{s.NewTestActivityEnvironment()}
			b := &activities.Backfills{Sinks: func(string) (streaming.Sink, error) { return deadSink{tc.err}, nil }}
			env.RegisterActivity(b)
			check := func(err error) {
				t.Helper()
				require.Error(t, err)
				typ, nonRetryable := appErrType(t, err)
				assert.Equal(t, !tc.retryable, nonRetryable, "%v", err)
				if !tc.retryable {
					assert.Equal(t, activities.ErrTypeSinkFailed, typ)
				}
				assert.Contains(t, err.Error(), tc.err.Error())
			}
			var res activities.ReplayPartitionResult
			check(env.run(b.ReplayPartition, activities.ReplayPartitionInput{Location: loc, Partition: "iot/shard-000000/", Sink: "influx:bf/autogen"}, &res))
			var list activities.ListArchiveResult
			require.NoError(t, env.run(b.ListArchive, activities.ListArchiveInput{Location: loc}, &list))
			require.NotEmpty(t, list.Files)
			var fres activities.ReplayFileResult
			check(env.run(b.ReplayFile, activities.ReplayFileInput{Location: loc, File: list.Files[0].Name, Sink: "influx:bf/autogen"}, &fres))
		})
	}
}
