package s3

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"

	"github.com/tflo-io/tflo/streaming"
)

const cursorDir = "cursor/"

// maxCursorBytes bounds a cursor object read back (an MQTT cursor at its
// largest capacities is a few MiB).
const maxCursorBytes = 64 << 20

// CursorStore is a streaming.CursorStore on S3: one small object per
// cursor key (see cursorName for the object name), holding
// streaming.MarshalCursorRecord bytes. Cursors are saved once per shard
// and checkpoint, not per record key, so one PUT per save is the cost.
//
// Fencing is a read-compare-write made atomic by a conditional PUT on the
// ETag read (If-Match, or If-None-Match "*" when the key is new): a writer
// that loses the race rereads and re-checks, so an older epoch never
// replaces a newer one, even across processes. The last record written
// per key is cached, so a steady owner's save is one PUT with no GET.
// Without conditional writes (WithConditionalWrites) every save reads the
// stored record first (a GET and a PUT): that still refuses a zombie,
// though not one racing the owner's save. Safe for concurrent use: saves
// of one key run one at a time, saves of different keys side by side (a
// stalled request for one shard's cursor holds no other shard's).
type CursorStore struct {
	obj         *objects
	conditional bool

	mu    sync.Mutex // guards turns and cache
	turns map[string]*keyTurn
	cache map[string]cachedCursor
}

// keyTurn serialises the saves of one cursor object: its read-compare-
// write (the fence) must not interleave with another save of the key.
// waiting counts the saves holding or waiting for it.
type keyTurn struct {
	ch      chan struct{} // holds a token while a save has the turn
	waiting int
}

type cachedCursor struct {
	rec  streaming.CursorRecord
	etag string
}

var _ streaming.CursorStore = (*CursorStore)(nil)

// NewCursorStore returns a CursorStore for bucket (the prefix, client and
// conditional-write options apply as for New).
func NewCursorStore(ctx context.Context, bucket string, opts ...Option) (*CursorStore, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(bucket); err != nil {
		return nil, fmt.Errorf("s3 cursor store: %w", err)
	}
	obj, err := newObjects(ctx, bucket, &cfg)
	if err != nil {
		return nil, err
	}
	return &CursorStore{obj: obj, conditional: cfg.conditional, turns: map[string]*keyTurn{}, cache: map[string]cachedCursor{}}, nil
}

// cursorName maps a key to its object name (keyName in cursor/).
func cursorName(key []byte) string { return keyName(cursorDir, key) }

// keyName maps a key of any bytes to an object name in dir: dir
// k-<hex(key)> for keys up to 256 bytes, dir h-<hex(sha256(key))> for
// longer ones (S3 object names are limited to 1024 bytes).
func keyName(dir string, key []byte) string {
	if len(key) <= 256 {
		return dir + "k-" + hex.EncodeToString(key)
	}
	sum := sha256.Sum256(key)
	return dir + "h-" + hex.EncodeToString(sum[:])
}

// SaveCursor stores rec under key unless a record of a newer epoch is
// stored (then the error wraps streaming.ErrFenced and nothing changes).
func (c *CursorStore) SaveCursor(ctx context.Context, key []byte, rec streaming.CursorRecord) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	name := cursorName(key)
	done, err := c.turn(ctx, name)
	if err != nil {
		return fmt.Errorf("s3 cursor store %s: cursor key %q: waiting for an earlier save of the key: %w", c.obj.uri(name), key, err)
	}
	defer done()
	body := streaming.MarshalCursorRecord(rec)
	for attempt := 0; ; attempt++ {
		c.mu.Lock()
		cur, ok := c.cache[name]
		c.mu.Unlock()
		if !ok || !c.conditional { // an unconditional PUT relies on a fresh read
			stored, etag, err := c.read(ctx, key)
			switch {
			case err == nil:
				cur = cachedCursor{rec: stored, etag: etag}
			case isNotFound(err):
				cur = cachedCursor{}
			default:
				return err
			}
		}
		if cur.etag != "" {
			if err := streaming.CheckCursorFence(key, cur.rec, rec); err != nil {
				return fmt.Errorf("s3 cursor store %s: %w", c.obj.uri(name), err)
			}
		}
		var ifMatch, ifNoneMatch string
		if c.conditional {
			if cur.etag == "" {
				ifNoneMatch = "*"
			} else {
				ifMatch = cur.etag
			}
		}
		etag, err := c.obj.put(ctx, name, body, ifMatch, ifNoneMatch)
		c.mu.Lock()
		if err != nil || etag == "" {
			delete(c.cache, name)
		} else {
			c.cache[name] = cachedCursor{rec: rec, etag: etag}
		}
		c.mu.Unlock()
		if err != nil {
			if isPreconditionFailed(err) && attempt < 10 {
				continue // another process wrote first: reread and re-check
			}
			return fmt.Errorf("s3 cursor store: cursor key %q: %w", key, err)
		}
		return nil
	}
}

// turn waits for name's turn (until ctx ends) and returns its release.
func (c *CursorStore) turn(ctx context.Context, name string) (func(), error) {
	c.mu.Lock()
	t := c.turns[name]
	if t == nil {
		t = &keyTurn{ch: make(chan struct{}, 1)}
		c.turns[name] = t
	}
	t.waiting++
	c.mu.Unlock()
	leave := func() {
		c.mu.Lock()
		if t.waiting--; t.waiting == 0 {
			delete(c.turns, name)
		}
		c.mu.Unlock()
	}
	select {
	case t.ch <- struct{}{}:
		return func() { <-t.ch; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}

// LoadCursor returns key's record, or an error wrapping
// streaming.ErrNotFound.
func (c *CursorStore) LoadCursor(ctx context.Context, key []byte) (streaming.CursorRecord, error) {
	if err := ctx.Err(); err != nil {
		return streaming.CursorRecord{}, err
	}
	rec, _, err := c.read(ctx, key)
	if isNotFound(err) {
		return streaming.CursorRecord{}, fmt.Errorf("s3 cursor store %s: cursor key %q: %w", c.obj.uri(cursorName(key)), key, streaming.ErrNotFound)
	}
	return rec, err
}

func (c *CursorStore) read(ctx context.Context, key []byte) (streaming.CursorRecord, string, error) {
	name := cursorName(key)
	body, etag, err := c.obj.get(ctx, name, maxCursorBytes)
	if err != nil {
		return streaming.CursorRecord{}, "", err
	}
	rec, err := streaming.UnmarshalCursorRecord(body)
	if err != nil {
		return streaming.CursorRecord{}, "", fmt.Errorf("s3 cursor store %s: cursor key %q: %w", c.obj.uri(name), key, err)
	}
	return rec, etag, nil
}
