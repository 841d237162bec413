package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/tflo-io/tflo/streaming"
)

// objects is the thin request layer every type of this package shares: one
// bucket and prefix, errors that name the object and the endpoint.
// Request bodies are always bytes.Reader (seekable), so signing and
// retries work over plain http as well as TLS.
type objects struct {
	client   *awss3.Client
	bucket   string
	prefix   string // "" or ending in "/"
	endpoint string
	timeout  time.Duration // the response timeout; 0: none, or the user's HTTP client's
}

func newObjects(ctx context.Context, bucket string, cfg *config) (*objects, error) {
	cl, err := cfg.buildClient(ctx)
	if err != nil {
		return nil, err
	}
	o := &objects{client: cl, bucket: bucket, prefix: cfg.objectPrefix(), endpoint: cfg.endpointName()}
	if cfg.client == nil && cfg.httpClient == nil {
		o.timeout = cfg.responseTimeout
	}
	return o, nil
}

func (o *objects) key(name string) string { return o.prefix + name }

// uri names an object in errors: s3://bucket/prefix/name.
func (o *objects) uri(name string) string { return "s3://" + o.bucket + "/" + o.prefix + name }

func (o *objects) wrap(op, name string, err error) error {
	if isResponseTimeout(err) {
		within := "the HTTP client's response header timeout"
		if o.timeout > 0 {
			within = o.timeout.String() + " (WithResponseTimeout)"
		}
		return fmt.Errorf("s3 %s %s (endpoint %s): %w: waited %s on every attempt: %w", op, o.uri(name), o.endpoint, ErrResponseTimeout, within, err)
	}
	return fmt.Errorf("s3 %s %s (endpoint %s): %w", op, o.uri(name), o.endpoint, classify(err))
}

// sub returns the objects of the folder dir below o's prefix (dir ends in
// "/"), on the same client.
func (o *objects) sub(dir string) *objects {
	c := *o
	c.prefix += dir
	return &c
}

// get reads a whole object of at most limit bytes and its ETag. A missing
// object returns an error for which isNotFound holds. An object larger
// than limit is refused (wrapping streaming.ErrCorrupt) before its body
// is read: the size comes from the server, never from a manifest, and is
// bounded before anything is allocated.
func (o *objects) get(ctx context.Context, name string, limit int64) ([]byte, string, error) {
	out, err := o.client.GetObject(ctx, &awss3.GetObjectInput{Bucket: &o.bucket, Key: aws.String(o.key(name))})
	if err != nil {
		return nil, "", o.wrap("get", name, err)
	}
	defer out.Body.Close()
	tooBig := func(n int64) error {
		return fmt.Errorf("s3 get %s (endpoint %s): object of %d bytes is over the %d bytes allowed: %w", o.uri(name), o.endpoint, n, limit, streaming.ErrCorrupt)
	}
	var buf bytes.Buffer
	if out.ContentLength != nil {
		if *out.ContentLength > limit {
			return nil, "", tooBig(*out.ContentLength)
		}
		if *out.ContentLength > 0 {
			buf.Grow(int(*out.ContentLength))
		}
	}
	if _, err := io.Copy(&buf, io.LimitReader(out.Body, limit+1)); err != nil {
		return nil, "", o.wrap("get", name, err)
	}
	if int64(buf.Len()) > limit {
		return nil, "", tooBig(int64(buf.Len()))
	}
	return buf.Bytes(), aws.ToString(out.ETag), nil
}

// getRange reads n bytes at off with one ranged GET. The response's
// ContentLength must be n before the buffer is allocated, so a record
// length the manifest lies about allocates nothing (the error wraps
// streaming.ErrCorrupt).
func (o *objects) getRange(ctx context.Context, name string, off, n uint64) ([]byte, error) {
	rng := fmt.Sprintf("bytes=%d-%d", off, off+n-1)
	out, err := o.client.GetObject(ctx, &awss3.GetObjectInput{Bucket: &o.bucket, Key: aws.String(o.key(name)), Range: &rng})
	if err != nil {
		return nil, o.wrap("get "+rng+" of", name, err)
	}
	defer out.Body.Close()
	if cl := out.ContentLength; cl != nil && (*cl < 0 || uint64(*cl) != n) {
		return nil, fmt.Errorf("s3 get %s of %s (endpoint %s): the server sends %d bytes, the manifest says %d: %w",
			rng, o.uri(name), o.endpoint, *cl, n, streaming.ErrCorrupt)
	}
	var buf []byte
	if out.ContentLength != nil {
		buf = make([]byte, n)
		if got, err := io.ReadFull(out.Body, buf); err != nil {
			return nil, o.wrap("get "+rng+" of", name, fmt.Errorf("read %d of %d bytes: %w", got, n, err))
		}
		return buf, nil
	}
	// No length announced: read what comes, up to n+1 bytes.
	buf, err = io.ReadAll(io.LimitReader(out.Body, int64(min(n, maxPutBytes))+1))
	if err != nil {
		return nil, o.wrap("get "+rng+" of", name, err)
	}
	if uint64(len(buf)) != n {
		return nil, fmt.Errorf("s3 get %s of %s (endpoint %s): the server sent %d bytes, the manifest says %d: %w",
			rng, o.uri(name), o.endpoint, len(buf), n, streaming.ErrCorrupt)
	}
	return buf, nil
}

// put writes body in one PUT. ifMatch/ifNoneMatch make it conditional
// ("" = unconditional). It returns the new ETag.
func (o *objects) put(ctx context.Context, name string, body []byte, ifMatch, ifNoneMatch string) (string, error) {
	in := &awss3.PutObjectInput{
		Bucket:        &o.bucket,
		Key:           aws.String(o.key(name)),
		Body:          bytes.NewReader(body),
		ContentLength: aws.Int64(int64(len(body))),
	}
	if ifMatch != "" {
		in.IfMatch = aws.String(ifMatch)
	}
	if ifNoneMatch != "" {
		in.IfNoneMatch = aws.String(ifNoneMatch)
	}
	out, err := o.client.PutObject(ctx, in)
	if err != nil {
		if code, status := apiCode(err); (ifMatch != "" || ifNoneMatch != "") && (code == "NotImplemented" || status == http.StatusNotImplemented) {
			return "", fmt.Errorf("s3 put %s (endpoint %s): the server does not support conditional writes (If-Match, If-None-Match), which fence a second writer; WithConditionalWrites(false) turns them off, with that fencing and epoch claims: %w: %w",
				o.uri(name), o.endpoint, errors.ErrUnsupported, err)
		}
		return "", o.wrap("put", name, err)
	}
	return aws.ToString(out.ETag), nil
}

// deleteMany removes names with DeleteObjects, 1000 keys per request.
// Deleting an absent object is not an error.
func (o *objects) deleteMany(ctx context.Context, names []string) error {
	for len(names) > 0 {
		chunk := names[:min(len(names), 1000)]
		names = names[len(chunk):]
		ids := make([]types.ObjectIdentifier, len(chunk))
		for i, n := range chunk {
			ids[i] = types.ObjectIdentifier{Key: aws.String(o.key(n))}
		}
		out, err := o.client.DeleteObjects(ctx, &awss3.DeleteObjectsInput{
			Bucket: &o.bucket,
			Delete: &types.Delete{Objects: ids, Quiet: aws.Bool(true)},
		})
		if err != nil {
			return o.wrap(fmt.Sprintf("delete %d objects from", len(chunk)), chunk[0], err)
		}
		var errs []error
		for _, e := range out.Errors {
			if aws.ToString(e.Code) == "NoSuchKey" {
				continue
			}
			errs = append(errs, fmt.Errorf("s3 delete s3://%s/%s (endpoint %s): %s: %s",
				o.bucket, aws.ToString(e.Key), o.endpoint, aws.ToString(e.Code), aws.ToString(e.Message)))
		}
		if err := errors.Join(errs...); err != nil {
			return err
		}
	}
	return nil
}

// list returns the objects below prefix+sub, names relative to the
// store's prefix, in the server's (byte-ascending) order.
func (o *objects) list(ctx context.Context, sub string) ([]listed, error) {
	var res []listed
	p := awss3.NewListObjectsV2Paginator(o.client, &awss3.ListObjectsV2Input{Bucket: &o.bucket, Prefix: aws.String(o.key(sub))})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, o.wrap("list", sub+"*", err)
		}
		if err := o.truncatedWithoutToken("list", sub+"*", page); err != nil {
			return nil, err
		}
		for _, c := range page.Contents {
			name, ok := strings.CutPrefix(aws.ToString(c.Key), o.prefix)
			if !ok {
				continue
			}
			res = append(res, listed{name: name, size: aws.ToInt64(c.Size)})
		}
	}
	return res, nil
}

// folders returns the folders right below prefix+sub (names relative to
// the store's prefix, ending in "/"): one LIST per 1000 folders, however
// many objects they hold.
func (o *objects) folders(ctx context.Context, sub string) ([]string, error) {
	var res []string
	p := awss3.NewListObjectsV2Paginator(o.client, &awss3.ListObjectsV2Input{Bucket: &o.bucket, Prefix: aws.String(o.key(sub)), Delimiter: aws.String("/")})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, o.wrap("list", sub+"*/", err)
		}
		if err := o.truncatedWithoutToken("list", sub+"*/", page); err != nil {
			return nil, err
		}
		for _, c := range page.CommonPrefixes {
			if name, ok := strings.CutPrefix(aws.ToString(c.Prefix), o.prefix); ok {
				res = append(res, name)
			}
		}
	}
	return res, nil
}

// truncatedWithoutToken refuses a page the server says is truncated but
// gives no token to continue from: the SDK's paginator stops there, and a
// listing cut short read as whole would hide objects (orphans left
// behind, a shard's manifest and its epoch missed).
func (o *objects) truncatedWithoutToken(op, name string, page *awss3.ListObjectsV2Output) error {
	if aws.ToBool(page.IsTruncated) && page.NextContinuationToken == nil {
		return fmt.Errorf("s3 %s %s (endpoint %s): the server says the listing is truncated but gives no continuation token (not S3-compatible?)", op, o.uri(name), o.endpoint)
	}
	return nil
}

type listed struct {
	name string
	size int64
}
