package kafka

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/testsuite/logtest"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestPublisherBackPressure: with the broker stalled, the bounded buffer
// fills and Publish blocks until its ctx ends (reported to the caller,
// not made sticky); once the broker answers, Flush completes.
func TestPublisherBackPressure(t *testing.T) {
	c := newCluster(t, 1)
	release := make(chan struct{})
	var once sync.Once
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { <-release })
		return nil, nil, false
	})
	defer once.Do(func() { close(release) })
	ctx := context.Background()
	pub, err := NewPublisher(ctx, PublishTo("readings", c.ListenAddrs()...), PublisherMaxBuffered(2),
		PublisherClientOptions(kgo.ProducerLinger(0)))
	require.NoError(t, err)
	defer pub.Close()

	require.NoError(t, pub.Publish(ctx, "s-1", reading("s-1", 1)))
	require.NoError(t, pub.Publish(ctx, "s-1", reading("s-1", 2)))
	require.Eventually(t, func() bool { return pub.Buffered() == 2 }, 5*time.Second, time.Millisecond)

	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	err = pub.Publish(short, "s-1", reading("s-1", 3))
	require.ErrorIs(t, err, context.DeadlineExceeded, "a full buffer must block the caller")
	require.ErrorContains(t, err, "buffer full")
	require.Equal(t, int64(2), pub.Buffered(), "the buffer grew past its bound")

	once.Do(func() { close(release) })
	fctx, fcancel := context.WithTimeout(ctx, 10*time.Second)
	defer fcancel()
	require.NoError(t, pub.Flush(fctx))
	require.Equal(t, uint64(2), pub.Produced())
	require.NoError(t, pub.Publish(ctx, "s-1", reading("s-1", 4)), "a blocked publish is not a sticky failure")
	require.NoError(t, pub.Flush(fctx))
}

// TestPublisherKeysAndEnvelope: signals keyed by sensor id stay in one
// partition per sensor, in order, and decode from the envelope.
func TestPublisherKeysAndEnvelope(t *testing.T) {
	c := newCluster(t, 4)
	addrs := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pub, err := NewPublisher(ctx, PublishTo("readings", addrs...))
	require.NoError(t, err)
	defer pub.Close()
	keys := sensorKeys(8)
	const per = 20
	for i := 1; i <= per; i++ {
		for _, k := range keys {
			sig := streaming.Signal[string, alarm]{Key: k, TS: int64(i), Mode: "high", Payload: alarm{float64(i), 25}}
			require.NoError(t, PublishSignal(ctx, pub, sig, &EnvelopeSource{"in", 0, int64(i)}, 7))
		}
	}
	require.NoError(t, pub.Flush(ctx))

	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.ConsumeTopics("readings"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	require.NoError(t, err)
	defer cl.Close()
	partOf := map[string]int32{}
	last := map[string]int64{}
	n := 0
	for n < per*len(keys) && ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			n++
			sig, env, err := DecodeSignal[string, alarm](r.Value)
			require.NoError(t, err)
			require.Equal(t, string(r.Key), sig.Key)
			require.Equal(t, uint64(7), env.Epoch)
			if p, ok := partOf[sig.Key]; ok {
				require.Equal(t, p, r.Partition, "key %s in two partitions", sig.Key)
			}
			partOf[sig.Key] = r.Partition
			require.Equal(t, last[sig.Key]+1, sig.TS, "key %s out of order", sig.Key)
			last[sig.Key] = sig.TS
			require.Equal(t, "signal/2", string(r.Headers[0].Value))
		})
	}
	require.Equal(t, per*len(keys), n)
}

// TestPublisherDeadLettersTooLargeRecords is issue 17.2 at the publisher:
// a signal too large for the broker (a 1.1 MB sensor id, or a value over
// the broker's message.max.bytes) failed with MESSAGE_TOO_LARGE, and the
// publisher kept that error, so every later signal of every sensor failed
// and the edge stopped. Such a record is dead-lettered now (truncated,
// with its size and SHA-256), and the publisher carries on.
func TestPublisherDeadLettersTooLargeRecords(t *testing.T) {
	const limit = 64 << 10
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	setMaxMessageBytes(t, ctx, addrs, "readings", limit)
	pub, err := NewPublisher(ctx, PublishTo("readings", addrs...))
	require.NoError(t, err)
	defer pub.Close()

	hugeKey := strings.Repeat("k", 1_100_000)                     // a 1.1 MB sensor id
	bigValue := randomBytes(rand.New(rand.NewPCG(3, 4)), 2*limit) // twice the topic's limit
	require.NoError(t, pub.Publish(ctx, "s-1", reading("s-1", 1)))
	require.NoError(t, pub.Publish(ctx, hugeKey, reading("x", 2)))
	require.NoError(t, pub.Publish(ctx, "s-1", bigValue))
	require.NoError(t, pub.Flush(ctx), "an oversized record is not a delivery failure")
	require.NoError(t, pub.Publish(ctx, "s-1", reading("s-1", 3)), "later publishes carry on")
	require.NoError(t, pub.Flush(ctx))
	require.Equal(t, uint64(2), pub.Produced())
	require.Equal(t, uint64(2), pub.DeadLettered())
	require.Equal(t, uint64(0), pub.Failed())

	letters := dlqRecords(t, addrs, 2)
	byKeyBytes := map[string]*kgo.Record{}
	for _, r := range letters {
		require.Equal(t, []string{"readings"}, headerValues(r, HeaderDLQTopic))
		require.Contains(t, headerValues(r, HeaderDLQError)[0], "MESSAGE_TOO_LARGE")
		if kb := headerValues(r, HeaderDLQKeyBytes); len(kb) == 1 {
			byKeyBytes[kb[0]] = r
		} else {
			byKeyBytes[""] = r
		}
	}
	huge := byKeyBytes[strconv.Itoa(len(hugeKey))]
	require.NotNil(t, huge, "the 1.1 MB key's dead letter")
	sum := sha256.Sum256([]byte(hugeKey))
	require.Equal(t, []string{hex.EncodeToString(sum[:])}, headerValues(huge, HeaderDLQKeySHA256))
	big := byKeyBytes[""]
	require.NotNil(t, big, "the big value's dead letter")
	require.Equal(t, []string{strconv.Itoa(len(bigValue))}, headerValues(big, HeaderDLQValueBytes))
	require.True(t, bytes.HasPrefix(bigValue, big.Value))

	// A client whose batch limit is above the topic's sends the big value
	// (alone in its batch: flushed before and after) and the broker
	// refuses it: dead-lettered from the produce promise.
	pub2, err := NewPublisher(ctx, PublishTo("readings", addrs...), PublisherClientOptions(kgo.ProducerBatchMaxBytes(1<<20)))
	require.NoError(t, err)
	defer pub2.Close()
	require.NoError(t, pub2.Publish(ctx, "s-1", bigValue))
	require.NoError(t, pub2.Flush(ctx), "the broker's MESSAGE_TOO_LARGE is not a delivery failure")
	require.NoError(t, pub2.Publish(ctx, "s-1", reading("s-1", 4)))
	require.NoError(t, pub2.Flush(ctx))
	require.Equal(t, uint64(1), pub2.Produced())
	require.Equal(t, uint64(1), pub2.DeadLettered())
	require.Len(t, dlqRecords(t, addrs, 3), 3)
}

// TestPublisherFlushIgnoresLaterRecords: Flush waits for the records
// published before it, not for the ones published while it waits. The
// bug (issue 16 item 8): Flush waited for the producer's whole buffer,
// which a saturated sink keeps refilling, so under load no checkpoint
// ever completed. Here a slow broker and four publishers keep the bounded
// buffer full the whole time: it never empties, and the flush must end.
func TestPublisherFlushIgnoresLaterRecords(t *testing.T) {
	c := newCluster(t, 1)
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		time.Sleep(5 * time.Millisecond) // a slow broker (stalls kfake's loop, which only this producer uses)
		return nil, nil, false
	})
	ctx := context.Background()
	pub, err := NewPublisher(ctx, PublishTo("readings", c.ListenAddrs()...), PublisherMaxBuffered(64))
	require.NoError(t, err)
	defer pub.Close()

	pctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	var published atomic.Uint64 // Publish returned nil: buffered
	for g := range 4 {
		wg.Go(func() {
			for i := 0; pctx.Err() == nil; i++ {
				if pub.Publish(pctx, "s-"+strconv.Itoa(g), reading("s", i)) != nil {
					return
				}
				published.Add(1)
			}
		})
	}
	require.Eventually(t, func() bool { return pub.Buffered() >= 32 }, 5*time.Second, time.Millisecond)
	for range 3 {
		// Every record buffered before the flush is acknowledged when it
		// returns. (Not "Produced grew": one produce response may
		// acknowledge the whole buffer just before the flush begins.)
		before := published.Load()
		fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		require.NoError(t, pub.Flush(fctx), "the flush waited for records published after it began")
		cancel()
		require.GreaterOrEqual(t, pub.Produced(), before, "the records buffered before the flush were acknowledged")
	}
	require.Greater(t, published.Load(), uint64(64), "the publishers kept the buffer busy")
	stop()
	wg.Wait()
}

// TestPublisherFlushWaitsForEarlierRecords: records published before
// Flush are acknowledged when it returns, even while the broker is slow.
func TestPublisherFlushWaitsForEarlierRecords(t *testing.T) {
	c := newCluster(t, 1)
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		time.Sleep(20 * time.Millisecond) // a slow broker
		return nil, nil, false
	})
	ctx := context.Background()
	pub, err := NewPublisher(ctx, PublishTo("readings", c.ListenAddrs()...))
	require.NoError(t, err)
	defer pub.Close()
	for i := range 200 {
		require.NoError(t, pub.Publish(ctx, "s-"+strconv.Itoa(i%7), reading("s", i)))
	}
	require.NoError(t, pub.Flush(ctx))
	require.Equal(t, uint64(200), pub.Produced())
	// kgo counts a record out of its buffer just after its promise ran (the
	// promise ends Flush's wait), so the count reaches zero an instant
	// later; it failed about once in 300 runs when read at once.
	require.Eventually(t, func() bool { return pub.Buffered() == 0 }, 5*time.Second, time.Millisecond)
}

// TestPublisherTooLargeLogIsSampled: a producer of oversized records gets
// a sample of "too large" lines, not one per record, while every record
// is dead-lettered and counted.
func TestPublisherTooLargeLogIsSampled(t *testing.T) {
	const n = 100
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logged := logtest.NewCounter("record too large for the broker; dead-lettered")
	start := time.Now()
	// A 4 KiB batch limit: each 8 KiB value is over it, and dead-lettered
	// (truncated to 16 KiB, so whole) before it is buffered.
	pub, err := NewPublisher(ctx, PublishTo("readings", addrs...), PublisherLogger(logged.Logger()),
		PublisherClientOptions(kgo.ProducerBatchMaxBytes(4<<10)))
	require.NoError(t, err)
	defer pub.Close()
	big := bytes.Repeat([]byte("v"), 8<<10)
	for range n {
		require.NoError(t, pub.Publish(ctx, "s-1", big))
	}
	require.NoError(t, pub.Flush(ctx))
	elapsed := time.Since(start)
	require.Equal(t, uint64(n), pub.DeadLettered())
	// Each dead letter (its 8 KiB value whole) is over the client's 4 KiB
	// limit too: dropped, and counted lost.
	require.Equal(t, uint64(n), pub.Failed())

	logged.RequireSampled(t, n, elapsed)
}

// TestPublisherCallerGivingUpFailsNothingBuffered: a caller's context
// bounds only its wait for room. Records it published earlier, still
// buffered when the context ends (a shard being released), are
// delivered, and the publisher does not fail: those records may share
// their batch with other callers'. Bug: kgo kept the caller's context as
// the buffered records' and failed them (and every record buffered for
// their partition) once it ended.
func TestPublisherCallerGivingUpFailsNothingBuffered(t *testing.T) {
	c := newCluster(t, 1)
	release := make(chan struct{})
	var once sync.Once
	unstall := func() { once.Do(func() { close(release) }) }
	defer unstall()
	var stalled atomic.Int32
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if stalled.Add(1) == 1 {
			c.SleepControl(func() { <-release })
		}
		return nil, nil, false
	})
	bg := context.Background()
	pub, err := NewPublisher(bg, PublishTo("readings", c.ListenAddrs()...), PublisherMaxBuffered(4),
		PublisherClientOptions(kgo.ProducerLinger(0)))
	require.NoError(t, err)
	defer pub.Close()

	require.NoError(t, pub.Publish(bg, "s-1", reading("s-1", 1))) // sent, stalled
	require.Eventually(t, func() bool { return stalled.Load() == 1 }, 5*time.Second, time.Millisecond)
	shard, cancel := context.WithCancel(bg)
	for i := 2; i <= 4; i++ {
		require.NoError(t, pub.Publish(shard, "s-1", reading("s-1", i)))
	}
	cancel() // the shard gives up with three records buffered behind the stalled one
	err = pub.Publish(shard, "s-1", reading("s-1", 5))
	require.ErrorIs(t, err, context.Canceled, "the buffer is full: the ended context ends the wait")
	require.ErrorContains(t, err, "buffer full")

	unstall()
	fctx, fcancel := context.WithTimeout(bg, 10*time.Second)
	defer fcancel()
	require.NoError(t, pub.Flush(fctx), "a caller giving up is no delivery failure")
	require.Equal(t, uint64(4), pub.Produced(), "every record buffered before the context ended is delivered")
	require.Zero(t, pub.Failed())
}

// TestPublisherDeadLettersKeepBatchesUnderTheDLQTopicLimit: a publisher
// read its own topic's max.message.bytes and capped every batch at it,
// those of its dead-letter topic too. A dead-letter topic with a lower
// limit than the topic's refused whole batches of truncated dead letters
// (about 17 KiB each), and each, already truncated, was dropped ("too
// large even truncated"). Its batches keep under the dead-letter topic's
// own limit now, so every dead letter reaches it.
func TestPublisherDeadLettersKeepBatchesUnderTheDLQTopicLimit(t *testing.T) {
	const n = 10
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	setMaxMessageBytes(t, ctx, addrs, "readings.dlq", 64<<10)
	pub, err := NewPublisher(ctx, PublishTo("readings", addrs...))
	require.NoError(t, err)
	defer pub.Close()

	// Over the topic's 1,000,012 bytes: dead-lettered, truncated. Each
	// its own random bytes: a batch of them does not compress.
	rng := rand.New(rand.NewPCG(11, 12))
	values := make([][]byte, n)
	for i := range values {
		values[i] = randomBytes(rng, 1_100_000)
	}
	// A slow broker: the dead letters buffered meanwhile go in one batch.
	c.ControlKey(kmsg.Produce.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		time.Sleep(100 * time.Millisecond)
		return nil, nil, false
	})
	for i, v := range values {
		require.NoError(t, pub.Publish(ctx, "s-"+strconv.Itoa(i), v))
	}
	require.NoError(t, pub.Flush(ctx))
	require.Equal(t, uint64(n), pub.DeadLettered())
	require.Zero(t, pub.Failed(), "dead letters lost")
	require.Len(t, dlqRecords(t, addrs, n), n)
}

// TestPublisherCountsAnOversizedRecordWhoseDeadLetterIsDropped: a record
// too large for the broker whose dead letter, even truncated, is too large
// for the dead-letter topic is lost (logged; it fails no Flush). Publish
// counted it in DeadLettered only, and not in Failed, so the loss showed
// in no counter (PublishDeadLetter counts its dropped dead letters in
// Failed). It is counted in Failed now.
func TestPublisherCountsAnOversizedRecordWhoseDeadLetterIsDropped(t *testing.T) {
	c := newCluster(t, 1)
	addrs := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	setMaxMessageBytes(t, ctx, addrs, "readings.dlq", 4<<10) // below a truncated dead letter's 16 KiB of value
	pub, err := NewPublisher(ctx, PublishTo("readings", addrs...))
	require.NoError(t, err)
	defer pub.Close()

	big := randomBytes(rand.New(rand.NewPCG(13, 14)), 1_100_000) // over the topic's limit: dead-lettered
	require.NoError(t, pub.Publish(ctx, "s-1", big))
	require.NoError(t, pub.Flush(ctx), "a dead letter's size fails no Flush")
	require.Equal(t, uint64(1), pub.DeadLettered())
	require.Equal(t, uint64(1), pub.Failed(), "the record is lost")
	require.Zero(t, pub.Produced())
}

// TestClosedPublisherErrorsNameTheTopic: a Write to a closed (or closing)
// Kafka output or dead-letter sink failed with the bare "kafka connector
// closed", naming neither the topic nor the record; it names both now,
// and still wraps ErrClosed.
func TestClosedPublisherErrorsNameTheTopic(t *testing.T) {
	c := newCluster(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out := []streaming.Output{{Key: "s-1", Name: "sma", TS: 1, Value: 1}}
	dead := []streaming.Output{{Shard: streaming.KafkaShard("readings", 2), Offset: 7, Topic: "readings", Key: "s-1",
		Dead: &streaming.DeadLetter{Key: []byte("s-1"), Value: []byte("{"), Partition: 2, Err: errors.New("unexpected end")}}}

	for _, closing := range []bool{false, true} { // closed, or refusing writes while Close drains
		pub, err := NewPublisher(ctx, PublishTo("readings", c.ListenAddrs()...))
		require.NoError(t, err)
		sink := NewOutputSink(pub, JSONOutputs{})
		dpub, err := NewPublisher(ctx, PublishTo("readings.dlq", c.ListenAddrs()...))
		require.NoError(t, err)
		dsink := NewDeadLetterSink(dpub)
		if closing {
			pub.stopAccepting()
			dpub.stopAccepting()
		} else {
			require.NoError(t, sink.Close(ctx))
			require.NoError(t, dsink.Close(ctx))
		}
		err = sink.Write(ctx, out)
		require.ErrorIs(t, err, ErrClosed)
		require.EqualError(t, err, `publish key "s-1" to "readings": kafka connector closed`, "closing %v", closing)
		err = dsink.Write(ctx, dead)
		require.ErrorIs(t, err, ErrClosed)
		require.EqualError(t, err, `dead letter of readings/2@7 to "readings.dlq": kafka connector closed`, "closing %v", closing)
		pub.Close()
		dpub.Close()
	}
}
