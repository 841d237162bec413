package natskv

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/tflo-io/tflo/coordination"
)

// MinServerVersion is the oldest nats-server with per-message TTLs and limit
// markers (JetStream API level 1).
const MinServerVersion = "2.11.0"

// Store is the JetStream KV coordination store of one job.
type Store struct {
	cfg       config
	js        jetstream.JetStream
	nc        *nats.Conn
	durable   jetstream.KeyValue
	ephemeral jetstream.KeyValue
	names     [3]string           // indexed by Keyspace
	streams   [3]jetstream.Stream // the buckets' streams, indexed by Keyspace
	values    valueRevs
}

var _ coordination.Store = (*Store)(nil)

// Open binds (creating if allowed) the two buckets of job.
func Open(ctx context.Context, js jetstream.JetStream, job string, opts ...Option) (*Store, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(job); err != nil {
		return nil, coordination.Fatal("open", 0, job, err)
	}
	// An explicit marker TTL is checked against an existing bucket below;
	// the default (the lease) only shapes a new one.
	markerTTLSet := cfg.markerTTL != 0
	if !markerTTLSet {
		cfg.markerTTL = cfg.ttl
	}
	info, err := js.AccountInfo(ctx)
	if err != nil {
		return nil, classify("open", 0, job, err)
	}
	if info.API.Level < 1 {
		return nil, coordination.Fatal("open", 0, job, fmt.Errorf(
			"nats-server %s has JetStream API level %d; per-message TTLs and expiry markers need nats-server %s or newer",
			js.Conn().ConnectedServerVersion(), info.API.Level, MinServerVersion))
	}
	s := &Store{cfg: cfg, js: js, nc: js.Conn()}
	s.names[coordination.Durable] = job + "_durable"
	s.names[coordination.Ephemeral] = job + "_ephemeral"

	if s.durable, err = s.bucket(ctx, jetstream.KeyValueConfig{
		Bucket: s.names[coordination.Durable], History: 1, Storage: cfg.storage, Replicas: cfg.replicas,
		Description: "tflo coordination: durable records of job " + job,
	}); err != nil {
		return nil, err
	}
	if s.ephemeral, err = s.bucket(ctx, jetstream.KeyValueConfig{
		Bucket: s.names[coordination.Ephemeral], History: 1, Storage: cfg.storage, Replicas: cfg.replicas,
		TTL: cfg.ttl, LimitMarkerTTL: cfg.markerTTL,
		Description: "tflo coordination: leases of job " + job,
	}); err != nil {
		return nil, err
	}
	for _, ks := range []coordination.Keyspace{coordination.Durable, coordination.Ephemeral} {
		if s.streams[ks], err = js.Stream(ctx, "KV_"+s.names[ks]); err != nil {
			return nil, classify("open", ks, s.names[ks], err)
		}
	}
	// A bucket made by hand may carry an age limit: durable records (split
	// progress, the plan) would then vanish a TTL after their last write.
	dst, err := s.durable.Status(ctx)
	if err != nil {
		return nil, classify("open", coordination.Durable, s.names[coordination.Durable], err)
	}
	if dst.TTL() != 0 {
		return nil, coordination.Fatal("open", coordination.Durable, dst.Bucket(), fmt.Errorf(
			"bucket TTL is %v, but durable records must never expire; delete the bucket or recreate it without a TTL", dst.TTL()))
	}
	st, err := s.ephemeral.Status(ctx)
	if err != nil {
		return nil, classify("open", coordination.Ephemeral, s.names[coordination.Ephemeral], err)
	}
	if st.TTL() != cfg.ttl {
		return nil, coordination.Fatal("open", coordination.Ephemeral, st.Bucket(), fmt.Errorf(
			"bucket TTL is %v but the configured lease is %v; delete the bucket or configure the same lease", st.TTL(), cfg.ttl))
	}
	if st.LimitMarkerTTL() <= 0 {
		return nil, coordination.Fatal("open", coordination.Ephemeral, st.Bucket(), errors.New(
			"bucket has no limit marker TTL, so expiry would never reach watchers; recreate it with LimitMarkerTTL"))
	}
	if markerTTLSet && st.LimitMarkerTTL() != cfg.markerTTL {
		return nil, coordination.Fatal("open", coordination.Ephemeral, st.Bucket(), fmt.Errorf(
			"bucket limit marker TTL is %v but the configured one is %v; delete the bucket or configure the same marker TTL", st.LimitMarkerTTL(), cfg.markerTTL))
	}
	return s, nil
}

func (s *Store) bucket(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := s.js.KeyValue(ctx, cfg.Bucket)
	if err == nil {
		return kv, nil
	}
	if !errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, classify("open", 0, cfg.Bucket, err)
	}
	if !s.cfg.create {
		return nil, coordination.Fatal("open", 0, cfg.Bucket, errors.New("bucket does not exist and bucket creation is disabled"))
	}
	kv, err = s.js.CreateKeyValue(ctx, cfg)
	if errors.Is(err, jetstream.ErrBucketExists) {
		kv, err = s.js.KeyValue(ctx, cfg.Bucket)
	}
	if errors.Is(err, jetstream.ErrLimitMarkerTTLNotSupported) {
		return nil, coordination.Fatal("open", 0, cfg.Bucket, fmt.Errorf("%w: nats-server %s or newer is needed", err, MinServerVersion))
	}
	if err != nil {
		return nil, classify("open", 0, cfg.Bucket, err)
	}
	return kv, nil
}

// Bucket returns the name of the bucket backing ks.
func (s *Store) Bucket(ks coordination.Keyspace) string { return s.names[ks] }

// LeaseTTL returns the ephemeral bucket's TTL.
func (s *Store) LeaseTTL() time.Duration { return s.cfg.ttl }

func (s *Store) kv(op string, ks coordination.Keyspace, key string, isPrefix bool) (jetstream.KeyValue, error) {
	if isPrefix {
		if err := coordination.CheckPrefix(op, ks, key); err != nil {
			return nil, err
		}
	} else if err := coordination.CheckKey(op, ks, key); err != nil {
		return nil, err
	}
	switch ks {
	case coordination.Durable:
		return s.durable, nil
	case coordination.Ephemeral:
		return s.ephemeral, nil
	}
	return nil, coordination.Fatal(op, ks, key, fmt.Errorf("unknown keyspace %d", uint8(ks)))
}

// classify maps a client error to Retryable or Fatal.
func classify(op string, ks coordination.Keyspace, key string, err error) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled),
		errors.Is(err, nats.ErrTimeout), errors.Is(err, nats.ErrConnectionClosed),
		errors.Is(err, nats.ErrConnectionReconnecting), errors.Is(err, nats.ErrDisconnected),
		errors.Is(err, nats.ErrNoResponders), errors.Is(err, jetstream.ErrNoHeartbeat),
		errors.Is(err, nats.ErrNoServers), errors.Is(err, jetstream.ErrServerShutdown):
		return coordination.Retryable(op, ks, key, err)
	case errors.Is(err, jetstream.ErrInvalidKey), errors.Is(err, jetstream.ErrBucketNotFound),
		errors.Is(err, jetstream.ErrJetStreamNotEnabled), errors.Is(err, nats.ErrMaxPayload):
		// A message above the server's max_payload is refused again on
		// every retry.
		return coordination.Fatal(op, ks, key, err)
	case errors.As(err, &apiErr):
		if apiErr.Code >= 500 || apiErr.Code == 503 {
			return coordination.Retryable(op, ks, key, err)
		}
		return coordination.Fatal(op, ks, key, err)
	}
	return coordination.Retryable(op, ks, key, err)
}

func wrongLastSeq(err error) bool {
	var apiErr *jetstream.APIError
	if !errors.As(err, &apiErr) {
		return false
	}
	return apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant
}

// headerRoom is what MaxValueSize keeps free of a message for the headers
// the KV operations add (operation, expected last sequence).
const headerRoom = 1024

// MaxValueSize is the largest value the store writes: the connected
// server's max_payload (1 MiB by default) less 1 KiB for headers. Create
// and Update refuse a larger value with a Fatal error naming both sizes.
func (s *Store) MaxValueSize() int { return int(s.nc.MaxPayload()) - headerRoom }

func (s *Store) checkValue(op string, ks coordination.Keyspace, key string, value []byte) error {
	if limit := s.MaxValueSize(); len(value) > limit {
		return coordination.Fatal(op, ks, key, fmt.Errorf("%w: the value is %d bytes, above the %d-byte limit (the server's max_payload of %d bytes less %d for headers)",
			nats.ErrMaxPayload, len(value), limit, s.nc.MaxPayload(), headerRoom))
	}
	return nil
}

// Create writes key if absent (a deleted or expired key is absent).
func (s *Store) Create(ctx context.Context, ks coordination.Keyspace, key string, value []byte) (coordination.CasOutcome, error) {
	kv, err := s.kv("create", ks, key, false)
	if err != nil {
		return coordination.Lost, err
	}
	if err := s.checkValue("create", ks, key, value); err != nil {
		return coordination.Lost, err
	}
	rev, err := kv.Create(ctx, key, value)
	switch {
	case err == nil:
		s.values.add(ks, coordination.Revision(rev))
		return coordination.WonAt(coordination.Revision(rev)), nil
	case errors.Is(err, jetstream.ErrKeyExists), wrongLastSeq(err):
		return coordination.Lost, nil
	}
	return coordination.Lost, classify("create", ks, key, err)
}

// Update replaces key iff it is at expected.
//
// JetStream's expected-last-subject-sequence check cannot tell a delete or
// expiry marker from a value, so an update at a marker's sequence would
// bring the key back. Update therefore first reads the message at expected:
// the message at a sequence never changes, so a marker there means the key
// was absent at expected and the update loses, whatever happens after the
// read. Any other message (or none: superseded, or not yet on the replica
// that answered) leaves the decision to the server's check. The read is
// skipped for a revision this Store has seen carry a value (valueRevs).
func (s *Store) Update(ctx context.Context, ks coordination.Keyspace, key string, value []byte, expected coordination.Revision) (coordination.CasOutcome, error) {
	kv, err := s.kv("update", ks, key, false)
	if err != nil {
		return coordination.Lost, err
	}
	if err := s.checkValue("update", ks, key, value); err != nil {
		return coordination.Lost, err
	}
	if expected == 0 {
		return coordination.Lost, nil
	}
	if !s.values.take(ks, expected) {
		switch m, err := s.streams[ks].GetMsg(ctx, uint64(expected)); {
		case err == nil:
			if m.Subject == s.subject(ks, key) && isMarker(m.Header) {
				return coordination.Lost, nil
			}
		case !errors.Is(err, jetstream.ErrMsgNotFound):
			return coordination.Lost, classify("update", ks, key, err)
		}
	}
	rev, err := kv.Update(ctx, key, value, uint64(expected))
	switch {
	case err == nil:
		s.values.add(ks, coordination.Revision(rev))
		return coordination.WonAt(coordination.Revision(rev)), nil
	case errors.Is(err, jetstream.ErrKeyRevisionMismatch), wrongLastSeq(err):
		return coordination.Lost, nil
	}
	return coordination.Lost, classify("update", ks, key, err)
}

// Get reads key.
func (s *Store) Get(ctx context.Context, ks coordination.Keyspace, key string) (coordination.Entry, error) {
	return s.get(ctx, "get", ks, key)
}

// get is Get on behalf of op: a failure names the operation the caller
// asked for (Delete reads the key after losing its guard).
func (s *Store) get(ctx context.Context, op string, ks coordination.Keyspace, key string) (coordination.Entry, error) {
	kv, err := s.kv(op, ks, key, false)
	if err != nil {
		return coordination.Entry{}, err
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return coordination.Entry{}, coordination.NotFound(ks, key)
	}
	if err != nil {
		return coordination.Entry{}, classify(op, ks, key, err)
	}
	s.values.add(ks, coordination.Revision(e.Revision()))
	return coordination.Entry{Key: key, Value: e.Value(), Revision: coordination.Revision(e.Revision())}, nil
}

// Delete writes a delete marker, guarded by expected when non-zero. A
// guarded delete of an absent key wins vacuously at revision 0; an
// unguarded one always writes a marker and returns its revision.
func (s *Store) Delete(ctx context.Context, ks coordination.Keyspace, key string, expected coordination.Revision) (coordination.CasOutcome, error) {
	if _, err := s.kv("delete", ks, key, false); err != nil {
		return coordination.Lost, err
	}
	m := nats.NewMsg(s.subject(ks, key))
	m.Header.Set(kvOperationHeader, "DEL")
	if expected != 0 {
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(uint64(expected), 10))
	}
	ack, err := s.js.PublishMsg(ctx, m)
	if err == nil {
		return coordination.WonAt(coordination.Revision(ack.Sequence)), nil
	}
	if !wrongLastSeq(err) {
		return coordination.Lost, classify("delete", ks, key, err)
	}
	if _, gerr := s.get(ctx, "delete", ks, key); errors.Is(gerr, coordination.ErrNotFound) {
		return coordination.WonAt(0), nil
	} else if gerr != nil {
		return coordination.Lost, gerr
	}
	return coordination.Lost, nil
}

func filter(prefix string) string {
	if prefix == "" {
		return ">"
	}
	return prefix + ">"
}

// subject is the stream subject of key (or of a filter) in ks's bucket.
func (s *Store) subject(ks coordination.Keyspace, key string) string {
	return "$KV." + s.names[ks] + "." + key
}

func (s *Store) replay(ctx context.Context, ks coordination.Keyspace, prefix string) (*replay, error) {
	return newReplay(ctx, s.streams[ks], s.subject(ks, filter(prefix)), len(s.subject(ks, "")))
}

// List returns every live key under prefix, sorted, as of one stream
// sequence at or after the call began.
//
// It replays the bucket's last message per subject through a watch and
// applies puts and deletes to a map until the replay is complete (see
// replay), so a key rewritten while the listing runs appears once, at its
// latest revision, and a key live throughout is never left out.
func (s *Store) List(ctx context.Context, ks coordination.Keyspace, prefix string) ([]coordination.Entry, error) {
	kv, err := s.kv("list", ks, prefix, true)
	if err != nil {
		return nil, err
	}
	w, err := kv.Watch(ctx, filter(prefix))
	if err != nil {
		return nil, classify("list", ks, prefix, err)
	}
	defer w.Stop()
	rp, err := s.replay(ctx, ks, prefix)
	if err != nil {
		return nil, classify("list", ks, prefix, err)
	}
	live := map[string]coordination.Entry{}
	for done := rp.empty(); !done; {
		select {
		case e, ok := <-w.Updates():
			if !ok {
				return nil, coordination.Retryable("list", ks, prefix, errors.New("watcher closed before the listing completed"))
			}
			if e == nil {
				continue // nats.go's count-based marker; see replay
			}
			switch e.Operation() {
			case jetstream.KeyValuePut:
				live[e.Key()] = coordination.Entry{Key: e.Key(), Value: e.Value(), Revision: coordination.Revision(e.Revision())}
			case jetstream.KeyValueDelete, jetstream.KeyValuePurge:
				delete(live, e.Key())
			}
			if done, err = rp.after(ctx, e); err != nil {
				return nil, classify("list", ks, prefix, err)
			}
		case <-ctx.Done():
			return nil, coordination.Retryable("list", ks, prefix, ctx.Err())
		}
	}
	out := make([]coordination.Entry, 0, len(live))
	for _, e := range live {
		s.values.add(ks, e.Revision)
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}
