package kafka

import (
	"context"
	"errors"
	"fmt"
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
// SaveCursor ignores its key: the cursor names the partition. LoadCursor
// reads the committed offset of the partition its key ends with
// ("…/<topic>/<partition>", a checkpoint name ending with the shard's
// streaming.KafkaShard name); the epoch and checkpoint id are not stored
// in Kafka and load as 0. Safe for concurrent use.
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
	k := string(key)
	if i := strings.LastIndexByte(k, '/'); i > 0 {
		if j := strings.LastIndexByte(k[:i], '/'); j >= 0 {
			k = k[j+1:]
		}
	}
	topic, part, err := streaming.ShardID(k).KafkaPartition()
	if err != nil {
		return streaming.CursorRecord{}, fmt.Errorf("cursor key %q: %w", key, err)
	}
	p := Partition{Topic: topic, Partition: part}
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
