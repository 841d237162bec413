package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/tflo-io/tflo/connectors/parquet"
)

// Archive is the Parquet archive's object store (parquet.Archive) on an S3
// prefix, with the capabilities rolling files and compaction need
// (parquet.Uploader, UploadLister, Mover, Deleter, PageLister; see
// archive_upload.go). PutAtomic is one PUT (atomic on S3: readers see the old object
// or the whole new one); Open is one HEAD, then reads are ranged GETs
// pinned to the ETag seen at Open, so a file replaced while a backfill
// reads it fails loudly instead of mixing two versions. Small reads share
// cached blocks (WithReadBlockSize; at most 4 blocks per open object).
// Safe for concurrent use.
type Archive struct {
	obj       *objects
	blockSize int64
	minPart   int64
	log       *slog.Logger
}

var _ parquet.Archive = (*Archive)(nil)

// NewArchive returns an archive on bucket below WithPrefix (the client
// options apply as for New).
func NewArchive(ctx context.Context, bucket string, opts ...Option) (*Archive, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		o(&cfg)
	}
	if err := cfg.validate(bucket); err != nil {
		return nil, fmt.Errorf("s3 archive: %w", err)
	}
	if cfg.minPartSize == 0 {
		cfg.minPartSize = s3MinPartSize
	}
	if cfg.minPartSize < 1 {
		return nil, fmt.Errorf("s3 archive: min part size %d is not positive", cfg.minPartSize)
	}
	obj, err := newObjects(ctx, bucket, &cfg)
	if err != nil {
		return nil, err
	}
	return &Archive{obj: obj, blockSize: cfg.readBlock, minPart: cfg.minPartSize, log: cfg.logger}, nil
}

// checkName refuses a name as the local and memory archives do
// (parquet.CheckObjectName), naming the archive and the operation. That
// includes a local temp file's name: the S3 archive writes no temp
// files, but an object so named would be hidden, and swept as a crashed
// writer's, in a folder the archive is synced to; List hides any such
// object another tool put there, as the local archive's does.
func (a *Archive) checkName(op, name string) error {
	return parquet.CheckObjectName("s3 archive "+a.obj.uri(""), op, name)
}

// List implements parquet.Archive.
func (a *Archive) List(ctx context.Context, prefix string) ([]parquet.ObjectInfo, error) {
	out, err := a.list(ctx, &awss3.ListObjectsV2Input{Bucket: &a.obj.bucket, Prefix: aws.String(a.obj.key(prefix))}, prefix, 0)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(x, y parquet.ObjectInfo) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// PutAtomic implements parquet.Archive with a single PUT.
func (a *Archive) PutAtomic(ctx context.Context, name string, data []byte) error {
	if err := a.checkName("put", name); err != nil {
		return err
	}
	if _, err := a.obj.put(ctx, name, data, "", ""); err != nil {
		return fmt.Errorf("s3 archive: %w", err)
	}
	return nil
}

// Open implements parquet.Archive: one HEAD for the size and ETag. The
// returned object's reads are bounded by its own lifetime (Close cancels
// them), not by ctx.
func (a *Archive) Open(ctx context.Context, name string) (parquet.Object, error) {
	if err := a.checkName("open", name); err != nil {
		return nil, err
	}
	head, err := a.obj.client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: &a.obj.bucket, Key: aws.String(a.obj.key(name))})
	if err != nil {
		if isNotFound(err) {
			return nil, fmt.Errorf("s3 archive %s: %w", a.obj.uri(name), parquet.ErrNotFound)
		}
		return nil, fmt.Errorf("s3 archive: %w", a.obj.wrap("head", name, err))
	}
	octx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	return &archiveObject{obj: a.obj, name: name, size: aws.ToInt64(head.ContentLength), etag: aws.ToString(head.ETag),
		blockSize: a.blockSize, ctx: octx, cancel: cancel}, nil
}

// archiveObject reads one archive object with ranged GETs. Reads smaller
// than a block go through a small cache of aligned blocks (at most
// cacheBlocks × blockSize bytes per open object), so a Parquet reader's
// many small reads (footer, page headers, column chunks of a small row
// group) cost one GET per block instead of one per read; reads of a block
// or more go straight to one GET.
type archiveObject struct {
	obj       *objects
	name      string
	size      int64
	etag      string
	blockSize int64
	ctx       context.Context
	cancel    context.CancelFunc

	once   sync.Once
	mu     sync.Mutex
	blocks []cachedBlock // most recently used last
}

type cachedBlock struct {
	idx  int64
	data []byte
}

const cacheBlocks = 4

var errObjectClosed = errors.New("s3 archive object is closed")

func (o *archiveObject) Size() int64 { return o.size }

// ReadAt implements io.ReaderAt, clamped to the size seen at Open (a short
// read at the end returns io.EOF).
func (o *archiveObject) ReadAt(p []byte, off int64) (int, error) {
	if err := o.ctx.Err(); err != nil {
		return 0, fmt.Errorf("s3 archive %s: %w", o.obj.uri(o.name), errObjectClosed)
	}
	if off < 0 {
		return 0, fmt.Errorf("s3 archive %s: negative offset %d", o.obj.uri(o.name), off)
	}
	if off >= o.size {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	n := int64(len(p))
	short := false
	if off+n > o.size {
		n, short = o.size-off, true
	}
	var err error
	if n >= o.blockSize {
		err = o.fetch(p[:n], off)
	} else {
		err = o.readCached(p[:n], off)
	}
	if err != nil {
		return 0, err
	}
	if short {
		return int(n), io.EOF
	}
	return int(n), nil
}

// readCached fills p from cached blocks, fetching the missing ones.
func (o *archiveObject) readCached(p []byte, off int64) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	for len(p) > 0 {
		idx := off / o.blockSize
		blk, err := o.block(idx)
		if err != nil {
			return err
		}
		c := copy(p, blk[off-idx*o.blockSize:])
		p, off = p[c:], off+int64(c)
	}
	return nil
}

// block returns block idx from the cache or with one GET. o.mu is held.
func (o *archiveObject) block(idx int64) ([]byte, error) {
	for i, b := range o.blocks {
		if b.idx == idx {
			o.blocks = append(append(o.blocks[:i:i], o.blocks[i+1:]...), b)
			return b.data, nil
		}
	}
	start := idx * o.blockSize
	data := make([]byte, min(o.blockSize, o.size-start))
	if err := o.fetch(data, start); err != nil {
		return nil, err
	}
	if len(o.blocks) == cacheBlocks {
		o.blocks = o.blocks[1:]
	}
	o.blocks = append(o.blocks, cachedBlock{idx: idx, data: data})
	return data, nil
}

// fetch fills p from off with one ranged GET pinned to the ETag seen at
// Open.
func (o *archiveObject) fetch(p []byte, off int64) error {
	rng := fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1)
	in := &awss3.GetObjectInput{Bucket: &o.obj.bucket, Key: aws.String(o.obj.key(o.name)), Range: &rng}
	if o.etag != "" {
		in.IfMatch = aws.String(o.etag)
	}
	out, err := o.obj.client.GetObject(o.ctx, in)
	if err != nil {
		if isNotFound(err) {
			// Deleted since Open (compaction replaced it): readers re-plan.
			return fmt.Errorf("s3 archive %s: deleted since it was opened: %w", o.obj.uri(o.name), parquet.ErrNotFound)
		}
		if isPreconditionFailed(err) {
			return fmt.Errorf("s3 archive %s: object replaced since it was opened (ETag %s): %w", o.obj.uri(o.name), o.etag, err)
		}
		return fmt.Errorf("s3 archive: %w", o.obj.wrap("get "+rng+" of", o.name, err))
	}
	defer out.Body.Close()
	if o.etag != "" && out.ETag != nil && *out.ETag != o.etag {
		// Servers that ignore If-Match on GET still return the ETag.
		return fmt.Errorf("s3 archive %s: object replaced since it was opened (ETag %s, now %s)", o.obj.uri(o.name), o.etag, *out.ETag)
	}
	if cl := out.ContentLength; cl != nil && *cl != int64(len(p)) {
		// A server (or a proxy) that ignores Range sends the whole
		// object: its first bytes are not those at off.
		return fmt.Errorf("s3 archive %s: get %s: the server sends %d bytes, not %d (does it ignore Range?)", o.obj.uri(o.name), rng, *cl, len(p))
	}
	if got, err := io.ReadFull(out.Body, p); err != nil {
		return fmt.Errorf("s3 archive %s: read %s: got %d of %d bytes: %w", o.obj.uri(o.name), rng, got, len(p), err)
	}
	if out.ContentLength == nil {
		// No length announced (chunked): the body must end with the
		// range, or its first bytes may not be those at off.
		if extra, _ := io.ReadFull(out.Body, make([]byte, 1)); extra > 0 {
			return fmt.Errorf("s3 archive %s: get %s: the server sends more than %d bytes (does it ignore Range?)", o.obj.uri(o.name), rng, len(p))
		}
	}
	return nil
}

// Close cancels reads in flight; later reads fail. Idempotent.
func (o *archiveObject) Close() error {
	o.once.Do(o.cancel)
	return nil
}
