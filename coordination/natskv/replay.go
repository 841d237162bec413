package natskv

import (
	"context"
	"errors"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// kvOperationHeader is the header JetStream KV marks deletes and purges
// with; nats.go does not export its name.
const kvOperationHeader = "KV-Operation"

// isMarker reports whether a stored message is a delete, a purge or a
// server limit marker (an expiry) rather than a value.
func isMarker(h nats.Header) bool {
	if len(h) == 0 {
		return false
	}
	switch h.Get(kvOperationHeader) {
	case "DEL", "PURGE":
		return true
	}
	return h.Get(jetstream.MarkerReasonHeader) != ""
}

// replay follows the initial replay of a KV watch (last message per subject,
// then everything newer) and tells when it is complete: when a message of
// every key stored when the replay began has been applied. A key live
// throughout is then present at its latest revision seen, once; a key
// deleted meanwhile is absent or present, as the order of events says.
//
// nats.go's own end-of-snapshot marker cannot say this: it counts messages,
// and writes during the replay throw the count off both ways (a key
// rewritten after it was read counts twice; a key whose old value was
// replaced before it was read is still to come, as its newer message). A
// stream sequence cannot serve as the end either: with one message per key,
// a key rewritten after that sequence has lost its older message. So
// newReplay asks the stream which keys it holds, after the watch's consumer
// exists, and the replay ends once each has shown up, however busy the
// writers are.
//
// A key can also vanish without a successor: a delete marker reaching its
// marker TTL. So an entry with nothing pending behind it also ends the
// replay when the stream confirms there is no later message under the
// filter (the pending count can lag a concurrent write).
type replay struct {
	stream  jetstream.Stream
	subject string // the watch's subject filter, "$KV.<bucket>.<prefix>>"
	pending map[string]struct{}
}

// newReplay lists the keys under subject; call it after the watch was
// created. keyAt is where keys start in a subject ("$KV.<bucket>.").
func newReplay(ctx context.Context, stream jetstream.Stream, subject string, keyAt int) (*replay, error) {
	info, err := stream.Info(ctx, jetstream.WithSubjectFilter(subject))
	if err != nil {
		return nil, err
	}
	r := &replay{stream: stream, subject: subject, pending: make(map[string]struct{}, len(info.State.Subjects))}
	for subj := range info.State.Subjects {
		if len(subj) > keyAt {
			r.pending[subj[keyAt:]] = struct{}{}
		}
	}
	return r, nil
}

// empty reports whether nothing was stored under the filter when the
// replay began, so the (empty) snapshot is complete before any entry.
func (r *replay) empty() bool { return len(r.pending) == 0 }

// after reports whether the replay is complete once e has been applied.
func (r *replay) after(ctx context.Context, e jetstream.KeyValueEntry) (bool, error) {
	delete(r.pending, e.Key())
	if len(r.pending) == 0 {
		return true, nil
	}
	if e.Delta() != 0 {
		return false, nil
	}
	_, err := r.stream.GetMsg(ctx, e.Revision()+1, jetstream.WithGetMsgSubject(r.subject))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return true, nil
	case err != nil:
		return false, err
	}
	return false, nil // a later message is on its way
}
