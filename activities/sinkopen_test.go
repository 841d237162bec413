package activities_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/tflo-io/tflo/activities"
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
