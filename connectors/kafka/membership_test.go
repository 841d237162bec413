package kafka

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStaticMemberFencedByItsTwin: two live members given one instance
// id (two processes with one worker id). The group lets the newer one
// replace the older, which must stop with ErrFencedInstance naming the id
// — not keep rejoining and fencing its twin back.
func TestStaticMemberFencedByItsTwin(t *testing.T) {
	c := newCluster(t, 4)
	addrs := c.ListenAddrs()
	l := newLedger()
	opts := func(name string) []SourceOption {
		return []SourceOption{WithBrokers(addrs...), WithGroup("central"), WithTopics("readings"), WithPartitions(l.as(name)),
			WithInstanceID("worker-1"), WithSessionTimeout(2 * time.Second), WithRebalanceTimeout(12 * time.Second)}
	}
	older := startMember(t, "older", opts("older")...)
	require.Eventually(t, func() bool { return older.src.Stats().Owned == 4 }, 20*time.Second, 5*time.Millisecond)
	newer := startMember(t, "newer", opts("newer")...)
	select {
	case err := <-older.done:
		require.ErrorIs(t, err, ErrFencedInstance)
		require.ErrorContains(t, err, `"worker-1"`)
	case <-time.After(30 * time.Second):
		t.Fatal("the older member did not stop when its instance id was taken over")
	}
	require.Eventually(t, func() bool { return newer.src.Stats().Owned == 4 }, 20*time.Second, 5*time.Millisecond)
}

// TestRebalanceTimeoutMustExceedRevokeTimeout: a member rejoins a
// rebalance only after its revoked partitions' final checkpoints, so a
// rebalance timeout at or under the revoke timeout is refused.
func TestRebalanceTimeoutMustExceedRevokeTimeout(t *testing.T) {
	_, err := NewSource(WithBrokers("127.0.0.1:1"), WithGroup("g"), WithTopics("t"), WithPartitions(newLedger().as("x")),
		WithRevokeTimeout(10*time.Second), WithRebalanceTimeout(10*time.Second))
	require.ErrorContains(t, err, "rebalance timeout 10s must exceed the revoke timeout 10s")
}

// TestLongRevokeTimeoutRaisesTheDefaultRebalanceTimeout: without
// WithRebalanceTimeout the group's is franz-go's 60s, so a revoke timeout
// of a minute or more let a member still taking a revoked partition's
// final checkpoint be removed from the group — what the check above
// refuses for a rebalance timeout that is set. The default now exceeds
// the revoke timeout (by 2s, as a pipeline's), and one that is set, or a
// raw client option, still wins.
func TestLongRevokeTimeoutRaisesTheDefaultRebalanceTimeout(t *testing.T) {
	rebalance := func(opts ...SourceOption) time.Duration {
		t.Helper()
		s, err := NewSource(append([]SourceOption{WithBrokers("127.0.0.1:1"), WithGroup("g"), WithTopics("t"), WithPartitions(newLedger().as("x"))}, opts...)...)
		require.NoError(t, err)
		cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers("127.0.0.1:1")}, s.cfg.groupOpts()...), s.cfg.kgoOpts...)...)
		require.NoError(t, err)
		defer cl.Close()
		return cl.OptValue(kgo.RebalanceTimeout).(time.Duration)
	}
	require.Equal(t, 60*time.Second, rebalance(), "franz-go's default")
	require.Equal(t, 92*time.Second, rebalance(WithRevokeTimeout(90*time.Second)))
	require.Equal(t, 120*time.Second, rebalance(WithRevokeTimeout(90*time.Second), WithRebalanceTimeout(2*time.Minute)))
	require.Equal(t, 100*time.Second, rebalance(WithRevokeTimeout(90*time.Second), WithClientOptions(kgo.RebalanceTimeout(100*time.Second))))
}

// TestSessionTimeoutTheBrokersRefuseStopsTheSource: a session timeout
// outside the brokers' group.min/max.session.timeout.ms fails every join.
// The Source logged a warning per attempt and ran on forever owning
// nothing; it stops with an error naming the timeout now.
func TestSessionTimeoutTheBrokersRefuseStopsTheSource(t *testing.T) {
	c := newCluster(t, 1, kfake.GroupMinSessionTimeout(6*time.Second))
	m := startMember(t, "m", WithBrokers(c.ListenAddrs()...), WithGroup("g"), WithTopics("readings"), WithPartitions(newLedger().as("m")),
		WithSessionTimeout(time.Second))
	err := waitStopped(t, m, "the Source ran on with a session timeout every join is refused")
	require.ErrorIs(t, err, kerr.InvalidSessionTimeout)
	require.ErrorContains(t, err, "session timeout 1s")
}

// TestGroupTheBrokersDoNotAuthorizeStopsTheSource: a member whose user
// may not use its group (an ACL) has every join refused with
// GROUP_AUTHORIZATION_FAILED. The Source logged a warning per attempt and
// ran on forever owning nothing; it stops now with an error naming the
// group.
func TestGroupTheBrokersDoNotAuthorizeStopsTheSource(t *testing.T) {
	c := newCluster(t, 1)
	c.Fault(kfake.Fault{Group: "central", Err: kerr.GroupAuthorizationFailed, Count: -1})
	m := startMember(t, "m", WithBrokers(c.ListenAddrs()...), WithGroup("central"), WithTopics("readings"), WithPartitions(newLedger().as("m")))
	err := waitStopped(t, m, "the Source ran on in a group every join is refused")
	require.ErrorIs(t, err, kerr.GroupAuthorizationFailed)
	require.ErrorContains(t, err, `group "central"`)
}

// TestTopicTheBrokersDoNotAuthorizeStopsTheSource: a member whose user
// may not read a topic it consumes (an ACL) gets TOPIC_AUTHORIZATION_FAILED
// on every metadata refresh. The Source logged a warning four times a
// second and ran on forever owning nothing; it stops now with an error
// naming the topic.
func TestTopicTheBrokersDoNotAuthorizeStopsTheSource(t *testing.T) {
	c := newCluster(t, 1)
	c.Fault(kfake.Fault{Topic: "readings", Err: kerr.TopicAuthorizationFailed, Count: -1})
	m := startMember(t, "m", WithBrokers(c.ListenAddrs()...), WithGroup("central"), WithTopics("readings"), WithPartitions(newLedger().as("m")))
	err := waitStopped(t, m, "the Source ran on with a topic it may not read")
	require.ErrorIs(t, err, kerr.TopicAuthorizationFailed)
	require.ErrorContains(t, err, `topic "readings"`)
}

// waitStopped waits for m's Source to stop and returns its error; why
// says what it would be doing if it ran on.
func waitStopped(t *testing.T, m *member, why string) error {
	t.Helper()
	select {
	case err := <-m.done:
		return err
	case <-time.After(20 * time.Second):
		t.Fatal(why)
		return nil
	}
}
