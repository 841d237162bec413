package pipeline

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
)

// finalTimeout bounds the final checkpoint of a source that stops on its
// own (an MQTT source at shutdown).
const finalTimeout = 10 * time.Second

// mqttRunner runs an MQTTSource: one shard, named by the client id, at
// a new epoch each run, held by the worker's host like a Kafka partition (checkpointed by the
// coordinator's rounds, or every interval without Temporal), and also as
// soon as the stream stalls on unacknowledged messages, and when it stops.
type mqttRunner struct {
	w   *Worker
	cfg *MQTTSource
	src *mqtt.Source
	s   *shard                // owned by the source's handler goroutine once restored
	cur atomic.Pointer[shard] // s, for readers on other goroutines
	seq int64                 // records applied in this run: the outputs' Offset
	// typed: the pipeline's decoder is not the reading decoder, and input
	// is what it made of the message being handled (None, a bool, a
	// number), which a Reading's float cannot carry. The source decodes a
	// message and hands it to handle in one call under its lock, so input
	// is always the handled message's.
	typed bool
	input streaming.Computed
}

// evalDecoder is how the MQTT runner of s decodes a message, for
// Evaluate: with the reading decoder, the MQTT source's (which also
// takes RFC 3339 times) then the pipeline's limits, else the
// pipeline's bound decoder; then, with RequireTopicMatch (default true),
// the source's topic rule.
func (s *MQTTSource) evalDecoder(c *compiled) Decoder {
	dec := c.dec
	if _, reading := c.p.Decoder.(ReadingDecoder); reading {
		read := mqtt.DecodeReadingIn(time.Duration(c.p.TimeUnit.Nanos()))
		dec = limitedDecoder{inner: DecoderFunc(func(m Message, r *Record) error {
			rd, err := read(m.Value)
			if err != nil {
				return err
			}
			r.Key, r.TS = []byte(rd.Sensor), rd.TS
			r.Inputs[0] = streaming.Float(rd.Value)
			return nil
		}), check: c.dec.(limitedDecoder).check}
	}
	if s.RequireTopicMatch != nil && !*s.RequireTopicMatch {
		return dec
	}
	return DecoderFunc(func(m Message, r *Record) error {
		if err := dec.Decode(m, r); err != nil {
			return err
		}
		return mqtt.CheckTopicMatch(m.Topic, string(r.Key))
	})
}

func (w *Worker) newMQTTRunner(cfg *MQTTSource) (*mqttRunner, error) {
	if n := len(w.c.g.Inputs()); n != 1 {
		return nil, fmt.Errorf("an MQTT source gives one value per reading; the graph has %d inputs", n)
	}
	r := &mqttRunner{w: w, cfg: cfg}
	sent := cfg.ReceiveMaximum
	if cfg.OmitReceiveMaximum {
		sent = 0
	}
	opts := []mqtt.Option{
		mqtt.WithServers(cfg.Servers...), mqtt.WithClientID(cfg.ClientID), mqtt.WithTopics(cfg.Topics...),
		mqtt.WithDeadLetters(r.deadLetter), mqtt.WithLogger(w.log),
		mqtt.WithReceiveMaximum(sent), mqtt.WithDedupCapacity(min(4*int(cfg.ReceiveMaximum), streaming.MaxMQTTWindow), 4096),
		mqtt.WithLimits(w.c.p.Limits), mqtt.WithRequireTopicMatch(*cfg.RequireTopicMatch),
		mqtt.WithMaxPacketSize(uint32(cfg.MaxPacketSize)),
	}
	if _, reading := w.c.p.Decoder.(ReadingDecoder); reading {
		// A number is in time_unit already; an RFC 3339 ts is converted to it.
		opts = append(opts, mqtt.WithDecoder(mqtt.DecodeReadingIn(time.Duration(w.c.p.TimeUnit.Nanos()))))
	} else {
		dec := w.c.dec // with the pipeline's limits, which skip inputs that are no float
		r.typed = true
		// The topic too: Message.Topic is the MQTT topic, which a
		// decoder of your own may take the key from.
		opts = append(opts, mqtt.WithTopicDecoder(func(topic string, p []byte) (mqtt.Reading, error) {
			rec := Record{Inputs: make([]streaming.Computed, 1)}
			if err := dec.Decode(Message{Topic: topic, Value: p}, &rec); err != nil {
				return mqtt.Reading{}, fmt.Errorf("%w: %v", mqtt.ErrMalformed, err)
			}
			r.input = rec.Inputs[0]
			var v float64 // what the source's limits see: 0 for None, a bool or an int, as the pipeline's skip them
			if k := r.input.Kind(); k == streaming.KindFloat || k == streaming.KindSignal {
				v = r.input.Float64()
			}
			return mqtt.Reading{Sensor: string(rec.Key), TS: rec.TS, Value: v}, nil
		}))
	}
	if cfg.Username != "" {
		pw := os.Getenv(cfg.PasswordEnv)
		if cfg.PasswordEnv != "" && pw == "" {
			// Refused, as a Kafka source's SASL password_env is: sent
			// empty, a broker with authentication refused it as bad
			// credentials (naming the user, not the variable), and one
			// without let the worker run on none.
			return nil, fmt.Errorf("mqtt source: source.mqtt.password_env names %s (the password of user %q), which is unset or empty", cfg.PasswordEnv, cfg.Username)
		}
		opts = append(opts, mqtt.WithCredentials(cfg.Username, []byte(pw)))
	}
	if *cfg.AckOnCheckpoint {
		opts = append(opts, mqtt.WithAckOnCheckpoint())
	}
	if cfg.TLS != nil {
		tc, err := buildTLS(cfg.TLS)
		if err != nil {
			return nil, fmt.Errorf("mqtt source: %w", err)
		}
		opts = append(opts, mqtt.WithTLS(tc))
	}
	if w.o.reg != nil {
		hook, err := mqtt.PrometheusCounters(w.partsReg(), "tflo", cfg.ClientID)
		if err != nil {
			return nil, err
		}
		opts = append(opts, mqtt.WithCounterHook(hook))
	}
	src, err := mqtt.NewSource(opts...)
	if err != nil {
		return nil, err
	}
	r.src = src
	if w.dead == nil {
		// The default dead-letter sink: the source's topic on its broker,
		// published on the source's own connection.
		d, err := src.DeadLetterSink(cfg.DeadLetterTopic)
		if err != nil {
			return nil, fmt.Errorf("dead-letter sink: %w", err)
		}
		w.dead = &sinkSet{sinks: []streaming.Sink{d}, dead: true}
	}
	return r, nil
}

// run restores the shard, hands it to the worker's control plane as a
// held shard (the checkpoint coordinator's rounds with Temporal, the
// local interval without), consumes until ctx ends, then takes the final
// checkpoint and releases it.
func (r *mqttRunner) run(ctx context.Context) error {
	w := r.w
	id := streaming.ShardID(r.cfg.ClientID)
	var epoch atomic.Uint64
	owner := streaming.OwnershipFunc(func() (streaming.Epoch, bool) { return streaming.Epoch(epoch.Load()), true })
	// Each run of the shard owns it at a new epoch, one past the restored
	// checkpoint's (nextEpoch): the durable store refuses the commits of
	// an older run still going under the same client id, and the
	// coordinator takes the announcement of a new worker id for the shard
	// (a handoff from the old one) instead of refusing it as stale.
	s, err := w.openShard(ctx, id, nextEpoch, 1, func(s *shard) streaming.CheckpointSource { return mqttSource{s: s, src: r.src} }, nil, owner)
	if err != nil {
		return err
	}
	epoch.Store(uint64(s.epoch))
	r.s = s
	r.cur.Store(s)
	w.host.gained(s)
	defer func() {
		w.host.lost(s)
		r.cur.Store(nil)
		s.close()
	}()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	if *r.cfg.AckOnCheckpoint {
		wg.Go(func() { r.checkpointOnStall(runCtx, s) })
	}
	err = r.src.Run(runCtx, r.handle)
	cancel()
	wg.Wait()
	// The release begins: from here on the final checkpoint, if any, is
	// the only one that cuts the shard (shard.final); a round's
	// checkpoint queued behind it, or coming while the shard closes, is
	// refused as not held. The source's Cut is used only for its lock,
	// the one mqttSource.Cut reads s.final under; it cuts nothing.
	_ = r.src.Cut(func([]byte) error { s.final = true; return nil })
	if err != nil {
		return err
	}
	if w.crashOnStop.Load() {
		return nil // a test's crash: no final checkpoint
	}
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), finalTimeout)
	defer fcancel()
	if _, err := s.cp.Checkpoint(finalCheckpointContext(fctx)); err != nil {
		return fmt.Errorf("final checkpoint of shard %s: %w", id, err)
	}
	s.finalDone = true // before the deferred release reads it
	return nil
}

// ackStallTick is how often a source that acknowledges on checkpoint
// looks for a stalled stream: messages awaiting their acknowledgement and
// none arriving since the last look (the broker's in-flight window for
// this client is full: Receive Maximum, or a smaller broker limit; with
// omit_receive_maximum the broker's own, such as Mosquitto's
// max_inflight_messages, 20 by default).
const ackStallTick = 50 * time.Millisecond

// checkpointOnStall checkpoints s, beside the control plane's
// checkpoints, as soon as the stream stalls on messages awaiting their
// acknowledgement or they fill half the Receive Maximum: without it the
// broker would send at most one in-flight window per checkpoint interval.
// One goroutine: these checkpoints never overlap (the Checkpointer
// serializes them with the others).
func (r *mqttRunner) checkpointOnStall(ctx context.Context, s *shard) {
	t := time.NewTicker(ackStallTick)
	defer t.Stop()
	d := newStallDetector(int(r.cfg.ReceiveMaximum))
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := r.src.Stats()
		if !d.due(st.Received, st.PendingAcks) {
			continue
		}
		if f := r.w.o.stalled; f != nil {
			f(st.Received, st.PendingAcks)
		}
		if _, err := s.cp.Checkpoint(ctx); err != nil && ctx.Err() == nil {
			r.w.log.Warn("checkpoint failed", "shard", s.id, "err", err)
		}
	}
}

// Stall detection. A lull (no message since the last tick) with messages
// pending is a stall when it lasts longLullTicks, or from its first tick
// when the pending count is at the in-flight window such a long lull
// showed before. Counts at one tick cannot tell a full window from the
// lull of a stream that publishes in bursts: the demo's simulator sends
// its 20 sensors at once every 100 ms, and taking every lull with 10 or
// more pending for a full window checkpointed each burst, 10 times a
// second. So the window is unknown until a long lull shows it (the first
// stall at it costs 500 ms instead of 50), and forgotten when more than
// it are pending (it was not the broker's window). A stream never held
// by the broker is acknowledged by the periodic checkpoints and at half
// the Receive Maximum.
const longLullTicks = 10 // 500 ms

type stallDetector struct {
	half     int    // half the Receive Maximum: checkpoint at this many pending
	window   int    // the in-flight window a long lull showed; 0 while unknown
	received uint64 // Stats.Received at the last tick
	lull     int    // ticks since the last message, while messages are pending
}

func newStallDetector(receiveMaximum int) *stallDetector {
	return &stallDetector{half: receiveMaximum / 2}
}

// due reports whether to checkpoint, given the source's received and
// pending counts at a tick.
func (d *stallDetector) due(received uint64, pending int) bool {
	idle := received == d.received
	d.received = received
	if pending > 0 && idle {
		d.lull++
	} else {
		d.lull = 0
	}
	if pending > d.window {
		d.window = 0
	}
	if pending >= d.half && d.half > 0 {
		return true
	}
	if d.lull == 0 {
		return false
	}
	if d.window > 0 && pending >= d.window {
		d.lull = 0
		return true
	}
	if d.lull >= longLullTicks {
		d.window, d.lull = pending, 0
		return true
	}
	return false
}

// handle applies one reading; the source calls it under its cut lock, so
// a cut never falls between a reading and its outputs. ctx ends when the
// source stops: a sink waiting for room then gives up. A reading that
// fails (but one refused for the key cap) fails the source and leaves the
// message unacknowledged, for the broker to deliver again; its state
// update may have happened, or its outputs not all been written, so the
// shard takes no cut from then on (shard.failed): the next run restores
// the last checkpoint and applies the message once.
func (r *mqttRunner) handle(ctx context.Context, m mqtt.Message) error {
	s, w := r.s, r.w
	rd := m.Reading
	s.outs = s.outs[:0]
	r.seq++
	err := s.rt.Process(func(tx *keyedstate.Tx[string]) error {
		if r.typed {
			s.rec.Inputs[0] = r.input // None (the nodes fed by it skip it), a bool, a number
		} else {
			s.rec.Inputs[0] = streaming.Float(rd.Value)
		}
		inst, err := tx.Eval(rd.Sensor, rd.TS, s.rec.Inputs...)
		if errors.Is(err, keyedstate.ErrTooManyKeys) {
			// A new key over state.max_keys: the source dead-letters it.
			w.m.keysRefused.Add(1)
			return fmt.Errorf("%w: over state.max_keys: %w", mqtt.ErrRefused, err)
		}
		if errors.Is(err, keyedstate.ErrKeyTooLong) {
			// A key longer than the keyed state stores (limits.max_key_bytes
			// let it through): failing the source would fail it again at
			// every delivery of the message. The source dead-letters it.
			return fmt.Errorf("%w: %w", mqtt.ErrRefused, err)
		}
		if err != nil {
			return fmt.Errorf("shard %s, reading of %q at %d: %w", s.id, rd.Sensor, rd.TS, err)
		}
		s.outs = w.c.appendOutputs(s.outs, inst, streaming.Output{Shard: s.id, Epoch: s.epoch, Offset: r.seq, Topic: m.Topic, Key: rd.Sensor, TS: rd.TS * w.c.scale})
		return nil
	})
	if err == nil {
		if err = w.sinks.write(ctx, s.outs); err != nil {
			err = fmt.Errorf("shard %s, reading of %q at %d: %w", s.id, rd.Sensor, rd.TS, err)
		}
	}
	if err != nil {
		if !errors.Is(err, mqtt.ErrRefused) {
			s.failed = err // under the source's cut lock, as mqttSource.Cut reads it
		}
		return err
	}
	w.m.applied(s, 1, uint64(len(s.outs)), rd.TS*w.c.scale)
	return nil
}

func (r *mqttRunner) stats() sourceStats {
	st := r.src.Stats()
	owned := 0
	if r.cur.Load() != nil {
		owned = 1
	}
	return sourceStats{DeadLettered: st.DeadLettered, DeadLetterErrors: st.DeadLetterFailed, Owned: owned, Duplicates: st.Duplicates}
}

// subscribed reports whether the source has subscribed at least once.
func (r *mqttRunner) subscribed() bool { return r.src.Stats().Subscribes > 0 }

// linkErr says why the source is not connected to its broker and
// subscribed on that connection now (nil when it is), naming the source
// and the brokers: a worker whose broker is down receives nothing, ready
// as it was once.
func (r *mqttRunner) linkErr() error {
	st := r.src.Stats()
	switch {
	case !st.Connected && st.Connects == 0:
		return fmt.Errorf("mqtt source %q: not connected to broker %s yet", r.cfg.ClientID, strings.Join(r.cfg.Servers, ", "))
	case !st.Connected:
		return fmt.Errorf("mqtt source %q: connection to broker %s down, reconnecting", r.cfg.ClientID, strings.Join(r.cfg.Servers, ", "))
	case !st.Subscribed:
		return fmt.Errorf("mqtt source %q: not subscribed on broker %s yet", r.cfg.ClientID, strings.Join(r.cfg.Servers, ", "))
	}
	return nil
}

// mqttSource is the MQTT shard as the Checkpointer sees it: the keyed
// state and the source's dedup cursor, cut together between two messages.
type mqttSource struct {
	s   *shard
	src *mqtt.Source
}

var (
	_ streaming.CheckpointSource = mqttSource{}
	_ streaming.RunMerger        = mqttSource{}
	_ streaming.NodeDropper      = mqttSource{}
)

func (c mqttSource) DropNodes(nodes []string) { c.s.rt.DropNodes(nodes) }

func (c mqttSource) Cut(ctx context.Context) (streaming.Cut, error) {
	var kc streaming.Cut
	var cursor []byte
	release, err := c.src.CutWithAck(func(cur []byte) error {
		if err := c.s.cutRefused(ctx); err != nil {
			return err
		}
		var err error
		if kc, err = c.s.rt.Cut(ctx); err != nil {
			return err
		}
		cursor = cur
		c.s.markCut(-1) // an MQTT message has no offset
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &mqttCut{Cut: kc, cursor: cursor, ack: release}, nil
}

func (c mqttSource) Restore(ctx context.Context, typ string, cursor []byte, pieces iter.Seq2[[]byte, error]) error {
	if len(cursor) > 0 && typ != streaming.CursorTypeMQTT {
		return fmt.Errorf("shard %s: checkpoint cursor type %q, want %q: %w", c.s.id, typ, streaming.CursorTypeMQTT, streaming.ErrCorrupt)
	}
	if err := c.s.rt.Restore(ctx, typ, cursor, pieces); err != nil {
		return err
	}
	if len(cursor) == 0 {
		return nil
	}
	return c.src.Restore(cursor)
}

func (c mqttSource) MergeRuns(ctx context.Context, runs []iter.Seq2[[]byte, error], emit func([]byte) error) error {
	return c.s.rt.MergeRuns(ctx, runs, emit)
}

// mqttCut is the keyed state's cut with the MQTT cursor of the same
// moment; its release acknowledges the cut's messages.
type mqttCut struct {
	streaming.Cut
	cursor []byte
	ack    func(saved bool)
}

func (c *mqttCut) Cursor() (string, []byte) { return streaming.CursorTypeMQTT, c.cursor }

func (c *mqttCut) Release(saved bool) {
	c.Cut.Release(saved)
	c.ack(saved)
}

// manifestCursors is the cursor store of a source whose position lives in
// the checkpoint manifest only (an MQTT session has no offset to commit):
// saves do nothing, loads find nothing.
type manifestCursors struct{}

func (manifestCursors) SaveCursor(context.Context, []byte, streaming.CursorRecord) error { return nil }
func (manifestCursors) LoadCursor(_ context.Context, key []byte) (streaming.CursorRecord, error) {
	return streaming.CursorRecord{}, fmt.Errorf("cursor %q is kept in the checkpoint manifest: %w", key, streaming.ErrNotFound)
}

// deadLetter writes one of the source's dead letters to the pipeline's
// dead-letter sink (Pipeline.DeadLetter, by default the source's
// mqtt.DeadLetterSink), before the source acknowledges the message: a
// sink that buffers makes it durable in the checkpoint's pre-commit,
// before the acknowledgements it lets go (AckOnCheckpoint).
func (r *mqttRunner) deadLetter(ctx context.Context, m mqtt.DeadLetter) error {
	d := &streaming.DeadLetter{Value: slices.Clone(m.Payload), Partition: -1, Group: r.cfg.ClientID, PacketID: m.PacketID, Err: m.Cause}
	for _, p := range m.Props {
		d.Headers = append(d.Headers, streaming.Header{Key: p.Key, Value: []byte(p.Value)})
	}
	var epoch streaming.Epoch // 0 before the shard is restored
	if s := r.cur.Load(); s != nil {
		epoch = s.epoch
	}
	out := []streaming.Output{{Shard: streaming.ShardID(r.cfg.ClientID), Epoch: epoch, Offset: -1, Topic: m.Topic, TS: time.Now().UnixNano(), Dead: d}}
	return r.w.dead.sinks[0].Write(ctx, out)
}
