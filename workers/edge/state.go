package edge

import (
	"context"
	"encoding/binary"
	"fmt"
	"iter"
	"maps"
	"slices"

	"github.com/tflo-io/tflo/streaming"
)

// pieceVersion is the format of one checkpoint piece:
//
//	version uvarint | count uvarint | count × (uvarint len key | key | uvarint len blob | blob)
//
// each blob a streaming.Instance Save of the sensor's graph. A piece holds
// the sensors changed since the previous saved cut; on restore a later
// piece's entry wins. The Checkpointer's snapshot codec checksums pieces.
const pieceVersion = 1

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
		piece := binary.AppendUvarint(make([]byte, 0, len(cur)+12), pieceVersion)
		piece = binary.AppendUvarint(piece, uint64(count))
		piece = append(piece, cur...)
		cur, count = cur[:0], 0
		return emit(piece)
	}
	for _, e := range c.entries {
		cur = binary.AppendUvarint(cur, uint64(len(e.key)))
		cur = append(cur, e.key...)
		cur = binary.AppendUvarint(cur, uint64(len(e.blob)))
		cur = append(cur, e.blob...)
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
	off := 0
	next := func() (uint64, error) {
		v, n := binary.Uvarint(piece[off:])
		if n <= 0 {
			return 0, fmt.Errorf("truncated varint at byte %d: %w", off, streaming.ErrCorrupt)
		}
		off += n
		return v, nil
	}
	chunk := func() ([]byte, error) {
		n, err := next()
		if err != nil {
			return nil, err
		}
		if n > uint64(len(piece)-off) {
			return nil, fmt.Errorf("length %d at byte %d runs past the end (%d bytes): %w", n, off, len(piece), streaming.ErrCorrupt)
		}
		b := piece[off : off+int(n)]
		off += int(n)
		return b, nil
	}
	ver, err := next()
	if err != nil {
		return err
	}
	if ver != pieceVersion {
		return fmt.Errorf("format version %d, this build reads %d: %w", ver, pieceVersion, streaming.ErrCorrupt)
	}
	count, err := next()
	if err != nil {
		return err
	}
	if count > uint64(len(piece)) {
		return fmt.Errorf("claims %d entries in %d bytes: %w", count, len(piece), streaming.ErrCorrupt)
	}
	for range count {
		key, err := chunk()
		if err != nil {
			return err
		}
		blob, err := chunk()
		if err != nil {
			return err
		}
		if err := fn(string(key), blob); err != nil {
			return err
		}
	}
	if off != len(piece) {
		return fmt.Errorf("%d trailing bytes: %w", len(piece)-off, streaming.ErrCorrupt)
	}
	return nil
}
