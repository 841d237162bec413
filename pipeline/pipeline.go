package pipeline

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tflo-io/tflo/connectors/kafka"
	"github.com/tflo-io/tflo/connectors/mqtt"
	"github.com/tflo-io/tflo/connectors/parquet"
	"github.com/tflo-io/tflo/connectors/s3"
	"github.com/tflo-io/tflo/internal/tlsconfig"
	"github.com/tflo-io/tflo/streaming"
)

// Pipeline is one stream-processing job: a source and its decoder, the
// keyed graph every key runs, the sinks its outputs go to, where its state
// lives and how often it is checkpointed. Build it in Go, or load a YAML
// spec into it (Load, Parse). Run runs it; Evaluate runs it in memory over
// a sequence of messages (tests, examples).
//
// Zero fields take the defaults documented on them; Validate reports what
// cannot work. Deployment settings (worker id, Temporal, coordination
// store, metrics, logger) are not part of a Pipeline: they are Run's
// options.
type Pipeline struct {
	// Name names the pipeline in workflow ids, checkpoint keys, archive
	// files and metrics, and is the default consumer group. Required:
	// letters, digits, '.', '_' and '-'.
	Name string
	// Source is where records come from: a KafkaSource or an MQTTSource.
	// Required.
	Source Source
	// Decoder turns a message into a keyed record (default
	// ReadingDecoder: {"sensor","ts","value"} JSON readings).
	Decoder Decoder
	// TimeUnit is the unit of the records' event time (default
	// Milliseconds). Operators see it as decoded; outputs carry
	// nanoseconds.
	TimeUnit TimeUnit
	// Limits bounds what a decoded record may carry: key pattern and
	// length, magnitude of float inputs, event time skew and age (see
	// streaming.Limits; default streaming.Limits{}: keys
	// [A-Za-z0-9._:-]{1,128}, |value| <= 1e15, ts at most an hour ahead of
	// the clock). A record outside them is dead-lettered with the reason,
	// like one that does not decode, whatever the decoder. Its event time
	// is in TimeUnit: Limits.TSUnit is set from it (a different TSUnit is
	// refused).
	Limits streaming.Limits
	// Graph is the keyed graph every key runs. Required.
	Graph Graph
	// Sinks receive the graph's outputs (none: outputs are dropped, the
	// state is still checkpointed).
	Sinks []SinkSpec
	// DeadLetter receives the dead letters: records that cannot be
	// decoded, are outside Limits, are of a new key over
	// state.max_keys or (Kafka) of a key longer than the keyed state
	// stores (keyedstate.MaxKeyBytes with the shard's prefix), as Outputs carrying a streaming.DeadLetter, through
	// the same streaming.Sink contract as the other sinks (Flush is part
	// of every checkpoint's pre-commit). A KafkaSink (its records are the
	// original ones plus tflo-dlq-* headers) or Use(your own sink).
	// Default: for a Kafka source a KafkaSink to its DeadLetterTopic; an
	// MQTT source publishes them to its DeadLetterTopic on its broker, on
	// the connection the message came by, before acknowledging it.
	DeadLetter SinkSpec
	// State says where the keyed state lives and where checkpoints go.
	State State
	// Checkpoint is the checkpoint policy.
	Checkpoint Checkpoint

	// registry is the registry Load or Parse resolved the graph's
	// operator types in (WithRegistry); Run, Evaluate and SinkEnv resolve
	// them there too unless given another.
	registry *streaming.Registry
}

// Source is where a pipeline's records come from: *KafkaSource or
// *MQTTSource (values or pointers).
type Source interface {
	sourceName() string
}

// KafkaSource consumes a Kafka topic as a consumer-group member: each
// partition is a shard, owned by one worker of the group at a time.
type KafkaSource struct {
	// Brokers are the seed brokers ("host:port"). Required.
	Brokers []string `yaml:"brokers"`
	// Topic is consumed. Required.
	Topic string `yaml:"topic"`
	// Group is the consumer group (default: the pipeline's name).
	Group string `yaml:"group"`
	// DeadLetterTopic receives records that cannot be decoded, with
	// headers naming the source and the reason (default "<Topic>.dlq"):
	// the default dead-letter sink (Pipeline.DeadLetter), on the source's
	// brokers. Leave it empty when DeadLetter is set.
	DeadLetterTopic string `yaml:"dead_letter_topic"`
	// SessionTimeout: a member silent this long is removed from the group
	// and its partitions go to the others (default 10s; heartbeats every
	// tenth of it). A killed worker's partitions are idle this long.
	SessionTimeout time.Duration `yaml:"session_timeout"`
	// RebalanceTimeout: once a rebalance began, how long the group waits
	// for every member to rejoin (default RevokeTimeout + 2s, 12s; must
	// exceed RevokeTimeout, since a member rejoins after its revoked
	// partitions' final checkpoints). A worker killed while joining holds
	// the rebalance up to this long. With the defaults, partitions are
	// owned again within 15s of a kill, during a join or not.
	RebalanceTimeout time.Duration `yaml:"rebalance_timeout"`
	// StaticMembership joins the group with group.instance.id set to the
	// worker id (default true, when the worker id is given: WithWorkerID,
	// worker_id; a worker named by its host name joins as a dynamic
	// member). A restarted worker that rejoins within SessionTimeout gets
	// its partitions back without a rebalance (a rolling deploy moves
	// nothing); a stopped worker takes its final checkpoints but does not
	// leave the group, so on a scale-down its partitions wait
	// SessionTimeout before the others take them. Two live workers with
	// one id fence each other: the older stops with an error saying so.
	// Set true without a worker id, the worker warns (at start and at
	// --check) and joins as a dynamic member.
	StaticMembership *bool `yaml:"static_membership"`
	// RevokeTimeout bounds a revoked partition's final checkpoint
	// (default 10s); on timeout the partition is released without a
	// commit and the next owner replays from the last checkpoint.
	RevokeTimeout time.Duration `yaml:"revoke_timeout"`
	// Security is TLS and SASL (default plaintext).
	Security kafka.Security `yaml:"security"`
	// ClientOptions are raw franz-go options added to the consumer's
	// (dialers, timeouts; Go only).
	ClientOptions []kgo.Opt `yaml:"-"`
}

func (KafkaSource) sourceName() string { return "kafka" }

// MQTTSource subscribes to MQTT topic filters with QoS 2 on a persistent
// session: the pipeline has one shard, named by the client id, which
// checkpoints in process.
type MQTTSource struct {
	// Servers are broker URLs tried in order (mqtt://, tls://). Required.
	Servers []string `yaml:"servers"`
	// Topics are the filters subscribed to. Required.
	Topics []string `yaml:"topics"`
	// ClientID names the session and the shard (default: the pipeline's
	// name).
	ClientID string `yaml:"client_id"`
	// DeadLetterTopic receives the dead letters (QoS 1, on the source's
	// own connection), with the reason, source topic and packet id in
	// user properties: the default dead-letter sink (Pipeline.DeadLetter).
	// Required unless dead_letter is set (then leave it empty); must not
	// match Topics.
	DeadLetterTopic string `yaml:"dead_letter_topic"`
	// ReceiveMaximum bounds the unacknowledged messages in flight to the
	// source (default 4096; the QoS 2 dedup window holds 4× this, at
	// most streaming.MaxMQTTWindow).
	ReceiveMaximum uint16 `yaml:"receive_maximum"`
	// OmitReceiveMaximum leaves Receive Maximum out of CONNECT (no
	// broker-side flow control), for brokers whose flow control
	// misbehaves (mochi-mqtt v2.7.9; the embedded dev stack sets it).
	OmitReceiveMaximum bool `yaml:"omit_receive_maximum"`
	// AckOnCheckpoint acknowledges QoS 1/2 messages only once a
	// checkpoint containing them is saved, so a crash between two
	// checkpoints loses nothing: the broker redelivers what was not
	// acknowledged and the restored dedup window drops what the state
	// already has (default true: false acknowledges a message when it is
	// handled, and a crash loses the readings applied since the last
	// checkpoint). The broker sends at most its in-flight window of
	// unacknowledged messages (ReceiveMaximum, or a smaller broker limit;
	// with OmitReceiveMaximum the broker's own, such as Mosquitto's
	// max_inflight_messages, 20 by default, which Mosquitto applies only
	// to a client that announces no Receive Maximum), so the worker also
	// checkpoints as soon as the stream stalls on them or they fill half
	// of ReceiveMaximum.
	AckOnCheckpoint *bool `yaml:"ack_on_checkpoint"`
	// Username and PasswordEnv (the variable holding the password). The
	// password is sent with the user name only: PasswordEnv without
	// Username is refused, and a worker whose PasswordEnv names a
	// variable unset or empty does not start.
	Username    string `yaml:"username"`
	PasswordEnv string `yaml:"password_env"`
	// RequireTopicMatch dead-letters a reading whose sensor id is not the
	// last level of the topic it arrived on, so a client the broker lets
	// publish only on sensors/dev1 cannot write another sensor's state
	// (default true; set false for topics that do not end in the sensor
	// id).
	RequireTopicMatch *bool `yaml:"require_topic_match"`
	// MaxPacketSize is the MQTT v5 Maximum Packet Size announced in
	// CONNECT: the broker drops a larger message for this client instead
	// of sending it (default 64KiB, mqtt.DefaultMaxPacketSize).
	MaxPacketSize ByteSize `yaml:"max_packet_size"`
	// TLS of tls:// servers: ca_file (the CA that signed the broker's
	// certificate; default the system roots), cert_file and key_file (a
	// client certificate, for brokers requiring mutual TLS), server_name.
	TLS *tlsconfig.Config `yaml:"tls"`
}

func (MQTTSource) sourceName() string { return "mqtt" }

// TimeUnit is the unit of records' event time.
type TimeUnit string

// The time units.
const (
	Seconds      TimeUnit = "s"
	Milliseconds TimeUnit = "ms"
	Microseconds TimeUnit = "us"
	Nanoseconds  TimeUnit = "ns"
)

// Nanos returns the nanoseconds in one unit, or 0 for an unknown unit.
func (u TimeUnit) Nanos() int64 {
	switch u {
	case Seconds:
		return 1e9
	case Milliseconds, "":
		return 1e6
	case Microseconds:
		return 1e3
	case Nanoseconds:
		return 1
	}
	return 0
}

// Graph is the keyed graph: nodes of registered operator types wired by
// name (the spec form), or a graph built in Go (Built). Every key (sensor,
// symbol) runs its own instance.
type Graph struct {
	// Inputs are the graph's inputs in evaluation order, each read from a
	// field of the decoded record. Required.
	Inputs []Input `yaml:"inputs"`
	// Nodes are operators by registered type name (see DefaultRegistry),
	// resolved when the pipeline starts. Node names identify their state:
	// renaming a node orphans it.
	Nodes []Node `yaml:"nodes"`
	// Outputs are the nodes (or inputs) whose values go to the sinks, in
	// order (default: every node no other node reads).
	Outputs []string `yaml:"outputs"`
	// Built is a graph built in Go with streaming.NewBuilder; Nodes and
	// Outputs must then be empty and Inputs name its inputs.
	Built *streaming.Graph `yaml:"-"`
	// Modes names the modes of a Built graph's outputs (nodes from a
	// registry name theirs).
	Modes streaming.ModeNames `yaml:"-"`
}

// Input is one graph input and the record field it is read from.
type Input struct {
	Name string
	// Field of the decoded record (default Name).
	Field string
}

// Node is one operator of a graph.
type Node struct {
	// Name identifies the node and its state.
	Name string `yaml:"name"`
	// Type is a registered operator type ("sma", "vwap").
	Type string `yaml:"type"`
	// Params are the type's parameters (ints, floats, bools, strings,
	// durations as "5s"); the type's defaults fill what is missing.
	Params map[string]any `yaml:"params"`
	// Inputs are the inputs or nodes feeding this one, in order.
	Inputs []string `yaml:"inputs"`
	// Line is where a spec declared the node (0 for Go), for errors.
	Line int `yaml:"-"`
}

// State says where a pipeline's keyed state lives.
type State struct {
	// Dir is the worker's Badger folder of hot state: the keys the
	// memory budget cannot hold, and the write-behind of evicted ones
	// (default "": Badger in memory, for tests and small state).
	Dir string `yaml:"dir"`
	// Memory is the budget of the keyed state: the cache of live key
	// instances, the write-behind buffers, Badger's memtables and pooled
	// compaction buffers, and a third left to the garbage collector
	// (default 256 MiB, at least MinMemory; see streaming/keyedstate). It
	// is divided evenly among the shards the worker holds (re-split as
	// shards come and go, at most as many ways as the source has
	// partitions). The worker binary runs at a
	// Go memory limit of Memory plus half of it (at least 128 MiB) unless
	// GOMEMLIMIT is set.
	Memory ByteSize `yaml:"memory"`
	// Durable is where checkpoints go and the next owner of a shard
	// restores from (default: the Badger at Dir, which suits one machine).
	Durable Durable `yaml:"durable"`

	// Hostile keys (issue 17.4): bounds on what random ids can make a
	// shard keep.

	// MaxKeys caps the keys one shard holds, in memory and in Badger
	// (default DefaultMaxKeys; -1: no cap). A record of a new key over the
	// cap goes to the dead-letter destination with the reason (counted in
	// Stats.KeysRefused and tflo_pipeline_keys_refused_total); the keys
	// held carry on, and deleted or expired keys make room.
	MaxKeys int `yaml:"max_keys"`
	// KeyTTL drops a key unseen for this long, with its state, in memory
	// and in Badger (default 0: keys never expire; at least 1s). It is
	// processing time, the worker's clock: event time would let one
	// far-future ts expire every key. Checkpoints carry when each key was
	// last seen, so its age survives a handoff or restart (the clocks of
	// the workers are assumed close); keys are swept every eighth of the
	// TTL (at least every 250ms), counted in Stats.KeysExpired and
	// tflo_pipeline_keys_expired_total.
	KeyTTL time.Duration `yaml:"key_ttl"`

	// AllowNonRestoredState makes a restore drop the saved state of the
	// nodes the graph no longer has, logging a warning that names them,
	// and restore every other node (default false: the checkpoint is
	// refused and the worker stops, like Flink without
	// --allowNonRestoredState). The dropped names are recorded in every
	// later checkpoint and stay taken: keys not written since may still
	// hold the old node's state, so a graph that adds a node of such a
	// name again is refused at restore. A node that still exists but runs
	// another operator, or at a type version it cannot migrate from, is
	// refused all the same.
	AllowNonRestoredState bool `yaml:"allow_non_restored_state"`
}

// MinMemory is the least State.Memory: Badger's memtables and pooled
// compaction buffers take some 40 MiB of any budget, and each shard
// two write batches (64 KiB or more) and its admission sketch; 80 MiB
// leaves room for keys in up to 100 shards. A worker holding more
// shards needs more: a shard that cannot open says so, naming
// state.memory.
const MinMemory = 80 << 20

// DefaultMaxKeys is State.MaxKeys's default: the most keys one shard
// holds unless the spec says otherwise.
const DefaultMaxKeys = 1_000_000

// DefaultStageTimeout is Checkpoint.StageTimeout's default.
const DefaultStageTimeout = 15 * time.Second

// Durable is a pipeline's durable checkpoint store: one of Dir, S3 or
// Store (none: the worker's own Badger).
type Durable struct {
	// Dir is a folder every worker of the pipeline reaches (one machine,
	// or a shared file system). Each shard keeps its checkpoints in its
	// own folder, <Dir>/<pipeline>/<shard>, locked by the worker process
	// that owns the shard: several workers share Dir, and a worker that
	// gains a shard waits until its previous owner released the folder.
	// (Each worker still needs its own State.Dir.)
	Dir string `yaml:"dir"`
	// S3 is a bucket.
	S3 *S3Store `yaml:"s3"`
	// Store is a store built in Go (not closed by the runtime). It should
	// also be a streaming.EpochClaimer, as the S3, Badger and in-memory
	// stores are, for an MQTT source's runs without a coordination store
	// (the worker warns, "shard epoch not claimed", when it is not).
	Store streaming.StateStore `yaml:"-"`
}

// inStateDB reports whether the checkpoints go to the worker's own state
// database: d names no store.
func (d Durable) inStateDB() bool { return d.Dir == "" && d.S3 == nil && d.Store == nil }

// S3Store names an S3 bucket (AWS, MinIO, any S3-compatible service).
type S3Store struct {
	// Bucket and Prefix locate the checkpoints (Prefix may be empty).
	Bucket string `yaml:"bucket"`
	Prefix string `yaml:"prefix"`
	// Endpoint of an S3-compatible service (path-style); empty: AWS.
	Endpoint string `yaml:"endpoint"`
	// Region; empty: the AWS SDK's (AWS_REGION, else the shared config's profile), else us-east-1.
	Region string `yaml:"region"`
	// AccessKeyEnv and SecretKeyEnv name the variables holding the keys
	// (empty: the SDK's default credential chain).
	AccessKeyEnv string `yaml:"access_key_env"`
	SecretKeyEnv string `yaml:"secret_key_env"`
	// TLS of an https endpoint: ca_file (a private CA, trusted beside the
	// system roots), cert_file and key_file, server_name.
	TLS *tlsconfig.Config `yaml:"tls"`
	// ResponseTimeout is how long a request waits for the server's answer once sent (0: 1m); the SDK tries 3 times, so a server that never answers fails a call after 3 timeouts and up to 6s of back-off.
	ResponseTimeout time.Duration `yaml:"response_timeout"`
}

// Checkpoint is a pipeline's checkpoint policy.
type Checkpoint struct {
	// Interval between checkpoints of a shard (default 10s). With
	// Temporal it is the interval of the pipeline's checkpoint
	// coordinator's rounds; without, the worker checkpoints in process.
	Interval time.Duration `yaml:"interval"`
	// MaxCheckpointAge (with Temporal): a worker that has seen no round of
	// the coordinator for this long checkpoints its shards on its own,
	// and the next round reconciles (default 3 intervals).
	MaxCheckpointAge time.Duration `yaml:"max_checkpoint_age"`
	// Disabled turns periodic checkpoints off (only revokes and shutdown
	// checkpoint; with Temporal the coordinator runs rounds only when
	// asked); for measurements.
	Disabled bool `yaml:"disabled"`
	// StageTimeout is the deadline of the snapshot and cursor-commit
	// stages of a checkpoint, and a quarter of the state save's (default
	// 15s: a minute to save).
	StageTimeout time.Duration `yaml:"stage_timeout"`
	// BreakerThreshold consecutive rounds with failed checkpoints open
	// the breaker of the checkpoint coordinator, which holds rounds off
	// for BreakerCoolDown, then runs one probe round (defaults 3 and 1m;
	// with Temporal only: without, a failed checkpoint is tried again at
	// the next interval).
	BreakerThreshold int           `yaml:"breaker_threshold"`
	BreakerCoolDown  time.Duration `yaml:"breaker_cool_down"`
	// HeartbeatTimeout of the worker's lease workflow: a worker silent
	// this long is declared dead and its shards are handed off (default
	// 30s).
	HeartbeatTimeout time.Duration `yaml:"heartbeat_timeout"`
	// HandoffStepTimeout bounds each step of a handoff (default 1m).
	HandoffStepTimeout time.Duration `yaml:"handoff_step_timeout"`
}

// withDefaults returns p with every default filled in. Defaults depend on
// other fields (the group on the name, the dead-letter topic on the
// topic), so they are applied after the whole value is known.
func (p Pipeline) withDefaults() Pipeline {
	switch s := p.Source.(type) {
	case KafkaSource:
		s.defaults(p.Name, p.DeadLetter != nil)
		p.Source = &s
	case *KafkaSource:
		c := *s
		c.defaults(p.Name, p.DeadLetter != nil)
		p.Source = &c
	case MQTTSource:
		s.defaults(p.Name)
		p.Source = &s
	case *MQTTSource:
		c := *s
		c.defaults(p.Name)
		p.Source = &c
	}
	if p.Decoder == nil {
		p.Decoder = ReadingDecoder{}
	}
	if p.TimeUnit == "" {
		p.TimeUnit = Milliseconds
	}
	if p.Limits.TSUnit == 0 {
		p.Limits.TSUnit = time.Duration(p.TimeUnit.Nanos())
	}
	g := &p.Graph
	g.Inputs = append([]Input(nil), g.Inputs...)
	for i := range g.Inputs {
		if g.Inputs[i].Field == "" {
			g.Inputs[i].Field = g.Inputs[i].Name
		}
	}
	if p.State.Memory == 0 {
		p.State.Memory = 256 << 20
	}
	if p.State.MaxKeys == 0 {
		p.State.MaxKeys = DefaultMaxKeys
	}
	c := &p.Checkpoint
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Interval, 10*time.Second)
	def(&c.MaxCheckpointAge, 3*max(c.Interval, 0)) // a negative interval is refused as itself
	def(&c.BreakerCoolDown, time.Minute)
	def(&c.HeartbeatTimeout, 30*time.Second)
	def(&c.HandoffStepTimeout, time.Minute)
	def(&c.StageTimeout, DefaultStageTimeout)
	if c.BreakerThreshold == 0 {
		c.BreakerThreshold = 3
	}
	if k, ok := p.DeadLetter.(KafkaSink); ok {
		p.DeadLetter = k.withDefaults()
	}
	p.Sinks = slices.Clone(p.Sinks)
	for i, s := range p.Sinks {
		if k, ok := s.(KafkaSink); ok {
			k = k.withDefaults()
			if k.Format == "" {
				k.Format = FormatJSON
			}
			p.Sinks[i] = k
		}
		if a, ok := s.(ArchiveSink); ok {
			if a.TargetFileSize == 0 {
				a.TargetFileSize = parquet.DefaultTargetFileSize
			}
			if a.MaxFileAge == 0 {
				a.MaxFileAge = parquet.DefaultMaxFileAge
			}
			p.Sinks[i] = a
		}
	}
	return p
}

// splitLists splits entries holding comma-separated lists (a ${NAME}
// reference to "a:9092,b:9092" fills one entry).
func splitLists(in []string) []string {
	var out []string
	for _, e := range in {
		for part := range strings.SplitSeq(e, ",") {
			if part = strings.TrimSpace(part); part != "" {
				out = append(out, part)
			}
		}
	}
	return out
}

func (s *KafkaSource) defaults(name string, deadLetterSink bool) {
	s.Brokers = splitLists(s.Brokers)
	if s.Group == "" {
		s.Group = name
	}
	if s.DeadLetterTopic == "" && s.Topic != "" && !deadLetterSink {
		s.DeadLetterTopic = s.Topic + ".dlq"
	}
	if s.RevokeTimeout == 0 {
		s.RevokeTimeout = 10 * time.Second
	}
	if s.SessionTimeout == 0 {
		s.SessionTimeout = 10 * time.Second
	}
	if s.RebalanceTimeout == 0 {
		s.RebalanceTimeout = s.RevokeTimeout + 2*time.Second
	}
	if s.StaticMembership == nil {
		on := true
		s.StaticMembership = &on
	}
}

func (s *MQTTSource) defaults(name string) {
	s.Servers = splitLists(s.Servers)
	if s.ClientID == "" {
		s.ClientID = name
	}
	if s.ReceiveMaximum == 0 {
		s.ReceiveMaximum = 4096
	}
	if s.RequireTopicMatch == nil {
		on := true
		s.RequireTopicMatch = &on
	}
	if s.AckOnCheckpoint == nil {
		on := true
		s.AckOnCheckpoint = &on
	}
	if s.MaxPacketSize == 0 {
		s.MaxPacketSize = mqtt.DefaultMaxPacketSize
	}
}

// Validate reports every problem of p (after defaults), as sentences.
// Operator types and parameters are checked when the graph is built
// (Run, Evaluate, or Load of a spec).
func (p Pipeline) Validate() error { return p.validate(nil) }

// validate is Validate that, given where (where a spec set a key path:
// "line 7: " for the file's line, "environment TFLO_X: " for a variable,
// "" for neither), starts the problem of one key with it, as the spec's
// decoding errors do.
func (p Pipeline) validate(where func(key string) string) error {
	p = p.withDefaults()
	var errs []error
	add := func(format string, args ...any) {
		if p.Name == "" {
			errs = append(errs, fmt.Errorf("pipeline: "+format, args...))
			return
		}
		errs = append(errs, fmt.Errorf("pipeline %q: "+format, append([]any{p.Name}, args...)...))
	}
	addAt := func(key, format string, args ...any) {
		if where != nil {
			format = where(key) + format
		}
		add(format, args...)
	}
	type duration struct {
		key string
		d   time.Duration
	}
	negative := func(ds ...duration) bool {
		found := false
		for _, d := range ds {
			if d.d < 0 {
				addAt(d.key, "%s %v must not be negative", d.key, d.d)
				found = true
			}
		}
		return found
	}
	switch {
	case p.Name == "":
		// A spec without name: said only that "" was a bad name.
		add("name is not set (it names the pipeline's workflows, checkpoints, consumer group, archive files and metrics): give one of letters, digits, '.', '_' or '-'")
	case !validName(p.Name):
		addAt("name", "the name must be letters, digits, '.', '_' or '-'")
	}
	switch s := p.Source.(type) {
	case nil:
		// A spec's (line) is converted first, and its conversion
		// (Spec.Pipeline) reported the source section's problem.
		if where == nil {
			add("no source: set a KafkaSource or an MQTTSource")
		}
	case *KafkaSource:
		if len(s.Brokers) == 0 {
			addAt("source.kafka.brokers", "source.kafka.brokers is empty")
		}
		if s.Topic == "" {
			addAt("source.kafka.topic", "source.kafka.topic is empty")
		}
		if s.DeadLetterTopic == s.Topic && s.Topic != "" {
			addAt("source.kafka.dead_letter_topic", "source.kafka.dead_letter_topic %q is the consumed topic: dead letters would be read back", s.Topic)
		}
		if p.DeadLetter != nil && s.DeadLetterTopic != "" {
			addAt("source.kafka.dead_letter_topic", "source.kafka.dead_letter_topic %q and dead_letter are both set: give one destination for dead letters", s.DeadLetterTopic)
		}
		if k, ok := kafkaSinkOf(p.DeadLetter); ok && k.Topic == s.Topic && k.sameCluster(s) {
			addAt("dead_letter", "dead_letter: kafka topic %q is the consumed topic: dead letters would be read back", s.Topic)
		}
		if err := deadLetterSpec(p.DeadLetter); err != nil {
			addAt("dead_letter", "dead_letter: %v", err)
		}
		if !negative(duration{"source.kafka.session_timeout", s.SessionTimeout},
			duration{"source.kafka.revoke_timeout", s.RevokeTimeout}, duration{"source.kafka.rebalance_timeout", s.RebalanceTimeout}) &&
			s.RebalanceTimeout <= s.RevokeTimeout {
			addAt("source.kafka.rebalance_timeout", "source.kafka.rebalance_timeout %v must exceed revoke_timeout %v: a worker rejoins a rebalance only after its revoked partitions' final checkpoints", s.RebalanceTimeout, s.RevokeTimeout)
		}
		if err := s.Security.Validate(); err != nil {
			addAt("source.kafka.security", "source.kafka.security: %v", err)
		}
	case *MQTTSource:
		if len(s.Servers) == 0 {
			addAt("source.mqtt.servers", "source.mqtt.servers is empty")
		}
		for i, srv := range s.Servers {
			// Refused here too, not only when the worker opens the source
			// (which then fails at start): worker --check refuses it.
			if err := mqtt.CheckServerURL(srv); err != nil {
				addAt("source.mqtt.servers", "source.mqtt.servers[%d]: %v", i, err)
			}
		}
		if len(s.Topics) == 0 {
			addAt("source.mqtt.topics", "source.mqtt.topics is empty")
		}
		switch {
		case s.DeadLetterTopic == "" && p.DeadLetter == nil:
			addAt("source.mqtt", "source.mqtt.dead_letter_topic is empty: malformed payloads need a destination (it, or dead_letter)")
		case s.DeadLetterTopic != "" && p.DeadLetter != nil:
			addAt("source.mqtt.dead_letter_topic", "source.mqtt.dead_letter_topic %q and dead_letter are both set: give one destination for dead letters", s.DeadLetterTopic)
		}
		if err := deadLetterSpec(p.DeadLetter); err != nil {
			addAt("dead_letter", "dead_letter: %v", err)
		}
		for _, t := range s.Topics {
			// No topic (dead letters go to dead_letter) is no read-back,
			// though "#" and "+" match the empty topic name.
			if s.DeadLetterTopic != "" && mqtt.TopicMatches(t, s.DeadLetterTopic) {
				addAt("source.mqtt.dead_letter_topic", "source.mqtt.dead_letter_topic %q matches the subscription %q: dead letters would be read back", s.DeadLetterTopic, t)
			}
		}
		if s.MaxPacketSize < 0 || s.MaxPacketSize > math.MaxUint32 {
			// MQTT's Maximum Packet Size is a four-byte integer: 4GiB
			// itself does not fit, and the message must not invite it.
			addAt("source.mqtt.max_packet_size", "source.mqtt.max_packet_size %d must be between 1 byte and %d bytes (4GiB - 1, MQTT's largest)", int64(s.MaxPacketSize), uint32(math.MaxUint32))
		}
		if s.PasswordEnv != "" && s.Username == "" {
			// The source sends the password only with a user name: the
			// key would be ignored, and the source would connect without
			// credentials.
			addAt("source.mqtt.password_env", "source.mqtt.password_env %q is set without source.mqtt.username: the password is sent only with a user name", s.PasswordEnv)
		}
		if err := validTLS(s.TLS); err != nil {
			addAt("source.mqtt.tls", "source.mqtt.tls: %v", err)
		}
		// Refused here, not only when the worker opens the source, so
		// that a spec's check (worker --check) refuses it too.
		if n := len(p.Graph.Inputs); n > 1 {
			addAt("graph.inputs", "graph.inputs: an MQTT source gives one value per reading; the graph reads %d inputs %v", n, inputNames(p.Graph.Inputs))
		}
	default:
		add("unknown source type %T", p.Source)
	}
	if p.TimeUnit.Nanos() == 0 {
		addAt("time_unit", "time_unit %q is not one of s, ms, us, ns", p.TimeUnit)
	} else if p.Limits.TSUnit != time.Duration(p.TimeUnit.Nanos()) {
		addAt("limits.ts_unit", "limits.ts_unit %v is not the event time's unit, time_unit %q: set time_unit only", p.Limits.TSUnit, p.TimeUnit)
	}
	// Each limit checked on its own, so its problem names its key and
	// line: streaming's problems, joined, named the section once, and
	// only the first of them.
	l, rest := p.Limits, p.Limits
	rest.KeyPattern, rest.MaxKeyBytes, rest.MaxAbsValue, rest.MaxTSAge = "", 0, 0, 0
	for _, lim := range []struct {
		key string
		l   streaming.Limits
	}{
		{"limits.key_pattern", streaming.Limits{KeyPattern: l.KeyPattern}},
		{"limits.max_key_bytes", streaming.Limits{MaxKeyBytes: l.MaxKeyBytes}},
		{"limits.max_abs_value", streaming.Limits{MaxAbsValue: l.MaxAbsValue}},
		{"limits.max_ts_age", streaming.Limits{MaxTSAge: l.MaxTSAge}},
		{"limits", rest}, // the others (their defaults for the ones above)
	} {
		err := lim.l.Validate()
		es := []error{err}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			es = j.Unwrap() // each problem on its own line
		}
		for _, e := range es {
			if e != nil {
				addAt(lim.key, "%s: %s", lim.key, strings.TrimPrefix(e.Error(), "limits: "))
			}
		}
	}
	g := p.Graph
	if len(g.Inputs) == 0 {
		addAt("graph", "graph.inputs is empty: name the record fields the graph reads")
	}
	seen := map[string]int{}
	for _, in := range g.Inputs {
		// Once a name, however often it is repeated.
		if seen[in.Name]++; seen[in.Name] == 1 && in.Name == "" || seen[in.Name] == 2 && in.Name != "" {
			addAt("graph.inputs", "graph input %q is empty or repeated", in.Name)
		}
	}
	switch {
	case g.Built != nil && (len(g.Nodes) > 0 || len(g.Outputs) > 0):
		add("graph: give either nodes (and outputs) or a built graph, not both")
	case g.Built != nil && strings.Join(g.Built.Inputs(), ",") != strings.Join(inputNames(g.Inputs), ","):
		add("graph: the built graph's inputs %v are not graph.inputs %v", g.Built.Inputs(), inputNames(g.Inputs))
	case g.Built == nil && len(g.Nodes) == 0:
		addAt("graph", "graph has no nodes")
	}
	if m := p.State.Memory; m < 0 {
		addAt("state.memory", "state.memory %d must be positive", int64(m))
	} else if m > 0 && m < MinMemory {
		addAt("state.memory", "state.memory %v is below the minimum %v: the state database's memtables and compaction buffers alone take some 40 MiB", m, ByteSize(MinMemory))
	}
	if p.State.MaxKeys < -1 {
		addAt("state.max_keys", "state.max_keys %d must be positive (-1: no cap)", p.State.MaxKeys)
	}
	if ttl := p.State.KeyTTL; ttl < 0 || ttl > 0 && ttl < time.Second {
		addAt("state.key_ttl", "state.key_ttl %v must be at least 1s (0: keys never expire)", ttl)
	}
	d := p.State.Durable
	n := 0
	for _, set := range []bool{d.Dir != "", d.S3 != nil, d.Store != nil} {
		if set {
			n++
		}
	}
	if n > 1 {
		addAt("state.durable", "state.durable: choose one of dir, s3 and a store")
	}
	if d.S3 != nil && d.S3.Bucket == "" {
		addAt("state.durable.s3.bucket", "state.durable.s3.bucket is empty")
	}
	if d.S3 != nil && (d.S3.AccessKeyEnv == "") != (d.S3.SecretKeyEnv == "") {
		addAt("state.durable.s3", "state.durable.s3: give access_key_env and secret_key_env together (neither: the SDK's default credential chain)")
	}
	if d.S3 != nil && d.S3.ResponseTimeout < 0 {
		addAt("state.durable.s3.response_timeout", fmt.Sprintf("state.durable.s3.response_timeout %v is negative (0: the default, %v)", d.S3.ResponseTimeout, s3.DefaultResponseTimeout))
	}
	if d.S3 != nil {
		if err := validTLS(d.S3.TLS); err != nil {
			addAt("state.durable.s3.tls", "state.durable.s3.tls: %v", err)
		}
	}
	c := p.Checkpoint
	negative(duration{"checkpoint.interval", c.Interval}, duration{"checkpoint.max_checkpoint_age", c.MaxCheckpointAge},
		duration{"checkpoint.stage_timeout", c.StageTimeout}, duration{"checkpoint.breaker_cool_down", c.BreakerCoolDown},
		duration{"checkpoint.heartbeat_timeout", c.HeartbeatTimeout}, duration{"checkpoint.handoff_step_timeout", c.HandoffStepTimeout})
	if c.BreakerThreshold < 0 {
		addAt("checkpoint.breaker_threshold", "checkpoint.breaker_threshold %d must not be negative", c.BreakerThreshold)
	}
	for i, s := range p.Sinks {
		if s == nil {
			add("sinks[%d] is nil", i)
		}
		if err := sinkProblem(s, p.Source); err != nil {
			addAt(fmt.Sprintf("sinks[%d]", i), "sinks[%d]: %v", i, err)
		}
		if k, ok := kafkaSinkOf(s); ok {
			if src, ok := p.Source.(*KafkaSource); ok && k.Topic == src.Topic && k.sameCluster(src) {
				addAt(fmt.Sprintf("sinks[%d]", i), "sinks[%d]: kafka topic %q is the consumed topic: outputs would be read back", i, src.Topic)
			}
		}
	}
	if deadLetterSpec(p.DeadLetter) == nil {
		if err := sinkProblem(p.DeadLetter, p.Source); err != nil {
			addAt("dead_letter", "dead_letter: %v", err)
		}
	}
	return errors.Join(errs...)
}

func inputNames(ins []Input) []string {
	out := make([]string, len(ins))
	for i, in := range ins {
		out[i] = in.Name
	}
	return out
}

func inputFields(ins []Input) []string {
	out := make([]string, len(ins))
	for i, in := range ins {
		out[i] = in.Field
	}
	return out
}

func validName(s string) bool {
	if s == "" || s == "." || s == ".." {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r == '-' || r == '.' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// deadLetter is the sink the dead letters go to (after defaults): DeadLetter,
// or for a Kafka source a KafkaSink to its DeadLetterTopic; nil for an
// MQTT source without DeadLetter, whose default (the source's
// mqtt.DeadLetterSink to its DeadLetterTopic) is made with the source.
func (p Pipeline) deadLetter() DeadLetterSpec {
	if p.DeadLetter != nil {
		d, _ := p.DeadLetter.(DeadLetterSpec) // Validate refused any other
		return d
	}
	if k, ok := p.Source.(*KafkaSource); ok && k.DeadLetterTopic != "" {
		return sourceDeadLetters{KafkaSink{Topic: k.DeadLetterTopic}}
	}
	return nil
}
