package edge

import (
	"context"
	"fmt"
	"iter"
	"maps"
	"slices"

	"github.com/tflo-io/tflo/streaming"
)

// Checkpoint pieces use the keyed piece format of package streaming
// (streaming.KeyedPieceVersion): the sensors changed since the previous
// saved cut, each blob a streaming.Instance Save of the sensor's graph; on
// restore a later piece's entry wins.

// pieceLimit is the size at which a piece is closed.
const pieceLimit = 1 << 20

// checkpointSource is the Pipeline as the Checkpointer sees it.
type checkpointSource struct{ p *Pipeline }

var _ streaming.CheckpointSource = checkpointSource{}

type entry struct {
	key  string
	blob []byte
}

// edgeCut is the changed sensors' state and the MQTT cursor at a point
// between two messages.
type edgeCut struct {
	p       *Pipeline
	cursor  []byte
	entries []entry
	release func(saved bool) // acknowledges the cut's MQTT messages
}

// Cut copies, between two messages, the state of the sensors changed since
// the last saved cut and the MQTT cursor. The hot path stalls for the
// copy: one small blob per changed sensor.
func (s checkpointSource) Cut(ctx context.Context) (streaming.Cut, error) {
	p := s.p
	c := &edgeCut{p: p}
	var err error
	c.release, err = p.src.CutWithAck(func(cursor []byte) error {
		c.cursor = cursor
		for _, key := range slices.Sorted(maps.Keys(p.dirty)) {
			in, ok := p.keyed.Lookup(key)
			if !ok {
				continue
			}
			blob, err := in.Save()
			if err != nil {
				return fmt.Errorf("sensor %q: %w", key, err)
			}
			c.entries = append(c.entries, entry{key: key, blob: blob})
		}
		clear(p.dirty)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("edge cut: %w", err)
	}
	return c, nil
}

func (c *edgeCut) Cursor() (string, []byte) { return streaming.CursorTypeMqtt, c.cursor }

// Pieces flushes the sink first — every signal derived from a record this
// state contains becomes durable before the state does — then emits the
// entries in pieces of about pieceLimit bytes.
func (c *edgeCut) Pieces(ctx context.Context, emit func(piece []byte) error) error {
	if err := c.p.sink.Flush(ctx); err != nil {
		return fmt.Errorf("edge cut: flush signals before saving state: %w", err)
	}
	var cur []byte
	count := 0
	flush := func() error {
		if count == 0 {
			return nil
		}
		piece := streaming.NewKeyedPiece(count, cur)
		cur, count = cur[:0], 0
		return emit(piece)
	}
	for _, e := range c.entries {
		cur = streaming.AppendPieceEntry(cur, e.key, e.blob)
		count++
		if len(cur) >= pieceLimit {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}

// Release acknowledges the cut's MQTT messages when the cut was saved
// (mqtt.WithAckOnCheckpoint); otherwise it puts the cut's sensors back
// among the changed ones, so the next cut carries them.
func (c *edgeCut) Release(saved bool) {
	c.release(saved)
	if saved || len(c.entries) == 0 {
		return
	}
	_ = c.p.src.Cut(func([]byte) error {
		for _, e := range c.entries {
			c.p.dirty[e.key] = struct{}{}
		}
		return nil
	})
}

// Restore replaces every sensor's state with the pieces' and positions the
// MQTT source at cursor. Called before the source runs.
func (s checkpointSource) Restore(ctx context.Context, cursorType string, cursor []byte, pieces iter.Seq2[[]byte, error]) error {
	p := s.p
	if cursorType != streaming.CursorTypeMqtt {
		return fmt.Errorf("edge restore: checkpoint cursor type %q, want %q: %w", cursorType, streaming.CursorTypeMqtt, streaming.ErrCorrupt)
	}
	keyed := streaming.NewKeyed[string](p.graph)
	n := 0
	for piece, err := range pieces {
		if err != nil {
			return fmt.Errorf("edge restore: %w", err)
		}
		if err := decodePiece(piece, func(key string, blob []byte) error {
			if err := keyed.Instance(key).Load(blob); err != nil {
				return fmt.Errorf("sensor %q: %w", key, err)
			}
			return nil
		}); err != nil {
			return fmt.Errorf("edge restore: piece %d: %w", n, err)
		}
		n++
	}
	if err := p.src.Restore(cursor); err != nil {
		return fmt.Errorf("edge restore: %w", err)
	}
	return p.src.Cut(func([]byte) error {
		p.keyed = keyed
		clear(p.dirty)
		return nil
	})
}

// decodePiece calls fn for each entry of a piece; blobs alias piece.
func decodePiece(piece []byte, fn func(key string, blob []byte) error) error {
	return streaming.DecodeKeyedPiece(piece, func(key, blob []byte) error { return fn(string(key), blob) })
}
