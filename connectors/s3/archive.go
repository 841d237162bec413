package s3

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/tflo-io/tflo/connectors/parquet"
)

// Archive is the Parquet archive's object store (parquet.Archive) on an S3
// prefix. PutAtomic is one PUT (atomic on S3: readers see the old object
// or the whole new one); Open is one HEAD, then each ReadAt is one ranged
// GET pinned to the ETag seen at Open, so a file replaced while a backfill
// reads it fails loudly instead of mixing two versions. Safe for
// concurrent use.
type Archive struct {
	obj *objects
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
	obj, err := newObjects(ctx, bucket, &cfg)
	if err != nil {
		return nil, err
	}
	return &Archive{obj: obj}, nil
}

func checkArchiveName(name string) error {
	if name == "" || !fs.ValidPath(name) || name == "." {
		return fmt.Errorf("s3 archive: %w: %q is not a clean relative path", parquet.ErrBadName, name)
	}
	return nil
}

// List implements parquet.Archive.
func (a *Archive) List(ctx context.Context, prefix string) ([]parquet.ObjectInfo, error) {
	objs, err := a.obj.list(ctx, prefix)
	if err != nil {
		return nil, fmt.Errorf("s3 archive: %w", err)
	}
	out := make([]parquet.ObjectInfo, 0, len(objs))
	for _, o := range objs {
		out = append(out, parquet.ObjectInfo{Name: o.name, Size: o.size})
	}
	slices.SortFunc(out, func(x, y parquet.ObjectInfo) int { return strings.Compare(x.Name, y.Name) })
	return out, nil
}

// PutAtomic implements parquet.Archive with a single PUT.
func (a *Archive) PutAtomic(ctx context.Context, name string, data []byte) error {
	if err := checkArchiveName(name); err != nil {
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
	if err := checkArchiveName(name); err != nil {
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
	return &archiveObject{obj: a.obj, name: name, size: aws.ToInt64(head.ContentLength), etag: aws.ToString(head.ETag), ctx: octx, cancel: cancel}, nil
}

// archiveObject reads one archive object with ranged GETs.
type archiveObject struct {
	obj    *objects
	name   string
	size   int64
	etag   string
	ctx    context.Context
	cancel context.CancelFunc

	once sync.Once
}

var errObjectClosed = errors.New("s3 archive object is closed")

func (o *archiveObject) Size() int64 { return o.size }

// ReadAt implements io.ReaderAt: one ranged GET, clamped to the size seen
// at Open (a short read at the end returns io.EOF).
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
	n := int64(len(p))
	if n == 0 {
		return 0, nil
	}
	short := false
	if off+n > o.size {
		n, short = o.size-off, true
	}
	rng := fmt.Sprintf("bytes=%d-%d", off, off+n-1)
	in := &awss3.GetObjectInput{Bucket: &o.obj.bucket, Key: aws.String(o.obj.key(o.name)), Range: &rng}
	if o.etag != "" {
		in.IfMatch = aws.String(o.etag)
	}
	out, err := o.obj.client.GetObject(o.ctx, in)
	if err != nil {
		if isPreconditionFailed(err) {
			return 0, fmt.Errorf("s3 archive %s: object replaced since it was opened (ETag %s): %w", o.obj.uri(o.name), o.etag, err)
		}
		return 0, fmt.Errorf("s3 archive: %w", o.obj.wrap("get "+rng+" of", o.name, err))
	}
	defer out.Body.Close()
	if o.etag != "" && out.ETag != nil && *out.ETag != o.etag {
		// Servers that ignore If-Match on GET still return the ETag.
		return 0, fmt.Errorf("s3 archive %s: object replaced since it was opened (ETag %s, now %s)", o.obj.uri(o.name), o.etag, *out.ETag)
	}
	got, err := io.ReadFull(out.Body, p[:n])
	if err != nil {
		return got, fmt.Errorf("s3 archive %s: read %s: got %d of %d bytes: %w", o.obj.uri(o.name), rng, got, n, err)
	}
	if short {
		return got, io.EOF
	}
	return got, nil
}

// Close cancels reads in flight; later reads fail. Idempotent.
func (o *archiveObject) Close() error {
	o.once.Do(o.cancel)
	return nil
}
