package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/tflo-io/tflo/streaming"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// GroupCursorStore is the streaming.CursorStore whose save is the consumer
// group's offset commit: the cursor stage of a partition's checkpoint
// commits offset+1 of the last record the saved state contains. The broker
// fences it: a member that is no longer in the group generation (a zombie)
// gets ILLEGAL_GENERATION or UNKNOWN_MEMBER_ID, which SaveCursor returns
// wrapping streaming.ErrFenced.
//
// Keys are ShardName values ("kafka/<group>/<topic>/<partition>"); the
// cursor itself names the partition. LoadCursor reads the committed offset
// (the epoch and checkpoint id are not stored in Kafka and load as 0).
// Safe for concurrent use.
type GroupCursorStore struct {
	cl    *kgo.Client
	group string
}

var _ streaming.CursorStore = (*GroupCursorStore)(nil)

// NewGroupCursorStore returns a cursor store committing through cl, which
// must be a member of group.
func NewGroupCursorStore(cl *kgo.Client, group string) *GroupCursorStore {
	return &GroupCursorStore{cl: cl, group: group}
}

// SaveCursor commits rec's offset. A record without a cursor (a partition
// that applied nothing) commits nothing.
func (g *GroupCursorStore) SaveCursor(ctx context.Context, key []byte, rec streaming.CursorRecord) error {
	if len(rec.Cursor) == 0 {
		return nil
	}
	if rec.Type != streaming.CursorTypeKafka {
		return fmt.Errorf("cursor %q: type %q, group commits take %q", key, rec.Type, streaming.CursorTypeKafka)
	}
	off, err := streaming.ParseKafkaOffset(rec.Cursor)
	if err != nil {
		return fmt.Errorf("cursor %q: %w", key, err)
	}
	var commitErr error
	g.cl.CommitOffsetsSync(ctx, map[string]map[int32]kgo.EpochOffset{
		off.Topic: {off.Partition: {Epoch: -1, Offset: off.Next()}},
	}, func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		if err != nil {
			commitErr = err
			return
		}
		for _, t := range resp.Topics {
			for _, p := range t.Partitions {
				if e := kerr.ErrorForCode(p.ErrorCode); e != nil && commitErr == nil {
					commitErr = e
				}
			}
		}
	})
	if commitErr != nil {
		if errors.Is(commitErr, kerr.IllegalGeneration) || errors.Is(commitErr, kerr.UnknownMemberID) ||
			errors.Is(commitErr, kerr.FencedInstanceID) || errors.Is(commitErr, kerr.StaleMemberEpoch) {
			return fmt.Errorf("commit %s for group %q at epoch %d: %v: %w", off, g.group, rec.Epoch, commitErr, streaming.ErrFenced)
		}
		return fmt.Errorf("commit %s for group %q: %w", off, g.group, commitErr)
	}
	return nil
}

// LoadCursor returns the group's committed position of key's partition as
// the cursor of the last consumed record, or an error wrapping
// streaming.ErrNotFound when nothing is committed.
func (g *GroupCursorStore) LoadCursor(ctx context.Context, key []byte) (streaming.CursorRecord, error) {
	p, err := parseShardName(g.group, string(key))
	if err != nil {
		return streaming.CursorRecord{}, err
	}
	req := kmsg.NewPtrOffsetFetchRequest()
	req.Group = g.group
	t := kmsg.NewOffsetFetchRequestTopic()
	t.Topic = p.Topic
	t.Partitions = []int32{p.Partition}
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, g.cl)
	if err != nil {
		return streaming.CursorRecord{}, fmt.Errorf("fetch committed offset of %s in group %q: %w", p, g.group, err)
	}
	if e := kerr.ErrorForCode(resp.ErrorCode); e != nil {
		return streaming.CursorRecord{}, fmt.Errorf("fetch committed offset of %s in group %q: %w", p, g.group, e)
	}
	for _, rt := range resp.Topics {
		for _, rp := range rt.Partitions {
			if rt.Topic != p.Topic || rp.Partition != p.Partition {
				continue
			}
			if e := kerr.ErrorForCode(rp.ErrorCode); e != nil {
				return streaming.CursorRecord{}, fmt.Errorf("fetch committed offset of %s in group %q: %w", p, g.group, e)
			}
			if rp.Offset < 0 {
				break
			}
			c := streaming.KafkaOffset{Topic: p.Topic, Partition: p.Partition, Offset: rp.Offset - 1}
			return streaming.CursorRecord{Type: streaming.CursorTypeKafka, Cursor: c.Bytes()}, nil
		}
	}
	return streaming.CursorRecord{}, fmt.Errorf("committed offset of %s in group %q: %w", p, g.group, streaming.ErrNotFound)
}

func parseShardName(group, key string) (Partition, error) {
	prefix := "kafka/" + group + "/"
	rest, ok := strings.CutPrefix(key, prefix)
	i := strings.LastIndexByte(rest, '/')
	if !ok || i <= 0 {
		return Partition{}, fmt.Errorf("cursor key %q is not %s<topic>/<partition>", key, prefix)
	}
	n, err := strconv.ParseInt(rest[i+1:], 10, 32)
	if err != nil || n < 0 {
		return Partition{}, fmt.Errorf("cursor key %q: partition %q is not a non-negative number", key, rest[i+1:])
	}
	return Partition{Topic: rest[:i], Partition: int32(n)}, nil
}

// nopCursorStore is the cursor store of the local copy's checkpointer: the
// local copy's position lives in its manifest; only the durable
// checkpoint commits to the group.
type nopCursorStore struct{}

func (nopCursorStore) SaveCursor(context.Context, []byte, streaming.CursorRecord) error { return nil }
func (nopCursorStore) LoadCursor(_ context.Context, key []byte) (streaming.CursorRecord, error) {
	return streaming.CursorRecord{}, fmt.Errorf("local cursor %q: %w", key, streaming.ErrNotFound)
}
