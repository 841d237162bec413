package portal

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/workers/central"
)

func TestTopicMatches(t *testing.T) {
	for _, c := range []struct {
		filter, topic string
		want          bool
	}{
		{"sensors/#", "sensors/a", true},
		{"sensors/#", "sensors", true},
		{"sensors/#", "dlq/sensors", false},
		{"sensors/+", "sensors/a", true},
		{"sensors/+", "sensors/a/b", false},
		{"#", "anything/at/all", true},
		{"a/b", "a/b", true},
		{"a/b", "a/c", false},
		{"+/dlq", "sensors/dlq", true},
	} {
		require.Equal(t, c.want, topicMatches(c.filter, c.topic), "%s vs %s", c.filter, c.topic)
	}
}

func TestCentralConfigValidate(t *testing.T) {
	base := func() CentralConfig {
		c := CentralConfig{Config: central.DefaultConfig()}
		c.WorkerID, c.Kafka.Brokers, c.State.Dir = "w", []string{"k:1"}, "/tmp/s"
		return c
	}
	for _, c := range []struct {
		name string
		mod  func(*CentralConfig)
		want string
	}{
		{"valid", func(*CentralConfig) {}, ""},
		{"two durable stores", func(c *CentralConfig) { c.Durable.Dir, c.Durable.S3.Bucket = "/d", "b" }, "choose one"},
		{"nowhere to checkpoint", func(c *CentralConfig) { c.State.Dir = "" }, "nowhere to go"},
		{"bad log level", func(c *CentralConfig) { c.Log.Level = "loud" }, `log.level "loud"`},
		{"library checks still run", func(c *CentralConfig) { c.WorkerID = "" }, "worker_id is empty"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := base()
			c.mod(&cfg)
			err := cfg.Validate()
			if c.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, c.want)
		})
	}
}
