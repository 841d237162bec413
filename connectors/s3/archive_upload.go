package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/tflo-io/tflo/connectors/parquet"
)

// The archive's rolling files are S3 multipart uploads: a file in
// progress is an upload under the archive's hidden staging prefix, its
// parts are uploaded as it grows, CompleteMultipartUpload finishes it at
// the checkpoint commit, and a server-side copy (CopyObject, or a
// multipart copy above 5 GiB) plus a delete gives it its final name
// (which holds the file's last offset, unknown when the upload began).
// Every step is idempotent, so a commit or restore repeated after a crash
// at any request ends in the same objects.

var (
	_ parquet.Uploader     = (*Archive)(nil)
	_ parquet.UploadLister = (*Archive)(nil)
	_ parquet.Mover        = (*Archive)(nil)
	_ parquet.Deleter      = (*Archive)(nil)
	_ parquet.PageLister   = (*Archive)(nil)
)

// s3MinPartSize is S3's smallest part but the last.
const s3MinPartSize = 5 << 20

// WithMinPartSize sets the smallest part (but the last) an Archive's
// uploads may have. Only for S3-compatible servers that accept parts
// below S3's minimum (tests use it to make many parts of small files).
// Default 5 MiB.
func WithMinPartSize(n int64) Option { return func(o *config) { o.minPartSize = n } }

func isNoSuchUpload(err error) bool {
	code, _ := apiCode(err)
	return code == "NoSuchUpload"
}

// CreateUpload implements parquet.Uploader with CreateMultipartUpload.
func (a *Archive) CreateUpload(ctx context.Context, name string) (string, error) {
	if err := a.checkName("create upload", name); err != nil {
		return "", err
	}
	out, err := a.obj.client.CreateMultipartUpload(ctx, &awss3.CreateMultipartUploadInput{Bucket: &a.obj.bucket, Key: aws.String(a.obj.key(name))})
	if err != nil {
		return "", fmt.Errorf("s3 archive: %w", a.obj.wrap("create upload", name, err))
	}
	return aws.ToString(out.UploadId), nil
}

// UploadPart implements parquet.Uploader (off is implied by the part
// number on S3).
func (a *Archive) UploadPart(ctx context.Context, name, uploadID string, n int, off int64, data []byte) (parquet.Part, error) {
	if err := a.checkName(fmt.Sprintf("upload part %d of", n), name); err != nil {
		return parquet.Part{}, err
	}
	out, err := a.obj.client.UploadPart(ctx, &awss3.UploadPartInput{
		Bucket: &a.obj.bucket, Key: aws.String(a.obj.key(name)), UploadId: &uploadID,
		PartNumber: aws.Int32(int32(n)), Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
	})
	if err != nil {
		if isNoSuchUpload(err) {
			return parquet.Part{}, fmt.Errorf("s3 archive %s: upload part %d: %w", a.obj.uri(name), n, parquet.ErrUploadNotFound)
		}
		return parquet.Part{}, fmt.Errorf("s3 archive: %w", a.obj.wrap(fmt.Sprintf("upload part %d of", n), name, err))
	}
	return parquet.Part{Number: n, Offset: off, Size: int64(len(data)), ETag: aws.ToString(out.ETag)}, nil
}

// CompleteUpload implements parquet.Uploader with CompleteMultipartUpload.
func (a *Archive) CompleteUpload(ctx context.Context, name, uploadID string, parts []parquet.Part) error {
	if err := a.checkName("complete", name); err != nil {
		return err
	}
	cps := make([]types.CompletedPart, len(parts))
	for i, p := range parts {
		cps[i] = types.CompletedPart{PartNumber: aws.Int32(int32(p.Number)), ETag: aws.String(p.ETag)}
	}
	_, err := a.obj.client.CompleteMultipartUpload(ctx, &awss3.CompleteMultipartUploadInput{
		Bucket: &a.obj.bucket, Key: aws.String(a.obj.key(name)), UploadId: &uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: cps},
	})
	if err != nil {
		if isNoSuchUpload(err) {
			return fmt.Errorf("s3 archive %s: complete upload: %w", a.obj.uri(name), parquet.ErrUploadNotFound)
		}
		return fmt.Errorf("s3 archive: %w", a.obj.wrap("complete upload of", name, err))
	}
	return nil
}

// AbortUpload implements parquet.Uploader with AbortMultipartUpload.
func (a *Archive) AbortUpload(ctx context.Context, name, uploadID string) error {
	if err := a.checkName("abort upload", name); err != nil {
		return err
	}
	_, err := a.obj.client.AbortMultipartUpload(ctx, &awss3.AbortMultipartUploadInput{Bucket: &a.obj.bucket, Key: aws.String(a.obj.key(name)), UploadId: &uploadID})
	if err != nil && !isNoSuchUpload(err) && !isNotFound(err) {
		return fmt.Errorf("s3 archive: %w", a.obj.wrap("abort upload of", name, err))
	}
	return nil
}

// MinPartSize implements parquet.Uploader: 5 MiB unless WithMinPartSize.
func (a *Archive) MinPartSize() int64 { return a.minPart }

// ListUploads implements parquet.UploadLister with ListMultipartUploads.
func (a *Archive) ListUploads(ctx context.Context, prefix string) ([]parquet.Upload, error) {
	var out []parquet.Upload
	in := &awss3.ListMultipartUploadsInput{Bucket: &a.obj.bucket, Prefix: aws.String(a.obj.key(prefix))}
	for {
		page, err := a.obj.client.ListMultipartUploads(ctx, in)
		if err != nil && isNoSuchUpload(err) && in.KeyMarker == nil && in.UploadIdMarker == nil {
			// gofakes3 answers so for a bucket that never had an upload.
			// On a later page (its marker upload gone meanwhile) it is an
			// error: the uploads past the marker would be left behind.
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("s3 archive: %w", a.obj.wrap("list uploads", prefix+"*", err))
		}
		for _, u := range page.Uploads {
			if name, ok := strings.CutPrefix(aws.ToString(u.Key), a.obj.prefix); ok && !parquet.IsTempName(name) {
				out = append(out, parquet.Upload{Name: name, ID: aws.ToString(u.UploadId)})
			}
		}
		if !aws.ToBool(page.IsTruncated) {
			return out, nil
		}
		// A truncated page without markers would be asked for again,
		// forever.
		if page.NextKeyMarker == nil && page.NextUploadIdMarker == nil {
			return nil, fmt.Errorf("s3 archive: s3 list uploads %s (endpoint %s): the server says the listing is truncated but gives no next marker (not S3-compatible?)", a.obj.uri(prefix+"*"), a.obj.endpoint)
		}
		in.KeyMarker, in.UploadIdMarker = page.NextKeyMarker, page.NextUploadIdMarker
	}
}

// maxCopyObjectSize is the largest source S3's CopyObject copies (5 GiB);
// a larger one is copied in parts (UploadPartCopy) of copyPartSize bytes.
// A rolling file or a compaction output closes once it reached its
// target, so it passes a 5 GiB target by a row group and its footer.
// Variables so a test can copy a small object in several parts.
var (
	maxCopyObjectSize int64 = 5 << 30
	copyPartSize      int64 = 1 << 30
)

// Move implements parquet.Mover: a server-side copy to the new name (one
// CopyObject, or UploadPartCopy parts above maxCopyObjectSize), then a
// delete of the old one. A crash between the two leaves both (the old one
// hidden); repeating the Move finishes it. A multipart copy's upload
// that its abort left open is in the error, or, when the source is gone
// but the target exists (the move done already), logged (WithLogger).
func (a *Archive) Move(ctx context.Context, from, to string) error {
	if err := a.checkName("move", from); err != nil {
		return err
	}
	if err := a.checkName("move", to); err != nil {
		return err
	}
	head, err := a.obj.client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: &a.obj.bucket, Key: aws.String(a.obj.key(from))})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("s3 archive: %w", a.obj.wrap("head", from, err))
	}
	var left error // a multipart copy's upload that its abort left open
	if err == nil {
		if size := aws.ToInt64(head.ContentLength); size > maxCopyObjectSize {
			err, left = a.copyInParts(ctx, from, to, size, aws.ToString(head.ETag))
		} else {
			err = a.copyObject(ctx, from, to)
		}
	}
	if err != nil {
		if !isNotFound(err) {
			return err
		}
		// The source is gone: moved already if the target exists.
		if _, herr := a.obj.client.HeadObject(ctx, &awss3.HeadObjectInput{Bucket: &a.obj.bucket, Key: aws.String(a.obj.key(to))}); herr != nil {
			if isNotFound(herr) {
				return errors.Join(fmt.Errorf("s3 archive: move %s to %s: neither exists: %w", a.obj.uri(from), a.obj.uri(to), parquet.ErrNotFound), left)
			}
			return errors.Join(fmt.Errorf("s3 archive: %w", a.obj.wrap("head", to, herr)), left)
		}
		if left != nil {
			// The move is done; the upload only costs storage until the
			// bucket's lifecycle rule for incomplete uploads removes it.
			a.log.Warn("s3 archive: move found the source gone and the target there (moved already); its own copy's upload stays open", "from", a.obj.uri(from), "to", a.obj.uri(to), "err", left)
		}
		return nil
	}
	if err := a.obj.deleteMany(ctx, []string{from}); err != nil {
		return fmt.Errorf("s3 archive: %w", err)
	}
	return nil
}

// copySource is from in the CopySource header's form.
func (a *Archive) copySource(from string) string {
	return url.PathEscape(a.obj.bucket) + "/" + escapeKey(a.obj.key(from))
}

// copyObject copies from to to with one CopyObject. A missing source
// returns an error for which isNotFound holds.
func (a *Archive) copyObject(ctx context.Context, from, to string) error {
	src := a.copySource(from)
	_, err := a.obj.client.CopyObject(ctx, &awss3.CopyObjectInput{Bucket: &a.obj.bucket, Key: aws.String(a.obj.key(to)), CopySource: &src})
	if err != nil && !isNotFound(err) {
		return fmt.Errorf("s3 archive: %w", a.obj.wrap("copy "+a.obj.uri(from)+" to", to, err))
	}
	return err
}

// copyInParts copies from (size bytes, ETag etag) to to with a multipart
// upload of UploadPartCopy byte ranges, each pinned to etag. A failed copy
// aborts its upload (on a crash, the bucket's lifecycle rule for
// incomplete uploads removes it). A missing source returns an error for
// which isNotFound holds and, apart, the abort's error (nil once the
// upload is aborted), for Move to report whether or not the move happened
// already; any other failure's error holds the abort's.
func (a *Archive) copyInParts(ctx context.Context, from, to string, size int64, etag string) (err, abortErr error) {
	// S3 allows at most 10,000 parts.
	partSize := max(copyPartSize, (size+9999)/10000)
	id, err := a.CreateUpload(ctx, to)
	if err != nil {
		return err, nil
	}
	src := a.copySource(from)
	var parts []types.CompletedPart
	for off := int64(0); off < size; off += partSize {
		n := int32(len(parts) + 1)
		rng := fmt.Sprintf("bytes=%d-%d", off, min(off+partSize, size)-1)
		in := &awss3.UploadPartCopyInput{Bucket: &a.obj.bucket, Key: aws.String(a.obj.key(to)), UploadId: &id,
			PartNumber: aws.Int32(n), CopySource: &src, CopySourceRange: &rng}
		if etag != "" {
			in.CopySourceIfMatch = aws.String(etag)
		}
		out, err := a.obj.client.UploadPartCopy(ctx, in)
		if err != nil {
			aerr := a.abortCopy(ctx, to, id)
			if isNotFound(err) {
				return err, aerr
			}
			return errors.Join(fmt.Errorf("s3 archive: %w", a.obj.wrap(fmt.Sprintf("copy %s of %s to part %d of", rng, a.obj.uri(from), n), to, err)), aerr), nil
		}
		var tag *string
		if out.CopyPartResult != nil {
			tag = out.CopyPartResult.ETag
		}
		parts = append(parts, types.CompletedPart{PartNumber: aws.Int32(n), ETag: tag})
	}
	_, err = a.obj.client.CompleteMultipartUpload(ctx, &awss3.CompleteMultipartUploadInput{
		Bucket: &a.obj.bucket, Key: aws.String(a.obj.key(to)), UploadId: &id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	})
	if err != nil {
		aerr := a.abortCopy(ctx, to, id)
		return errors.Join(fmt.Errorf("s3 archive: %w", a.obj.wrap(fmt.Sprintf("complete the copy of %s in %d parts to", a.obj.uri(from), len(parts)), to, err)), aerr), nil
	}
	return nil, nil
}

// abortCopy aborts a failed multipart copy's upload, also when ctx is
// done, for at most copyAbortTimeout. Its error names the upload left
// open (until the bucket's lifecycle rule for incomplete uploads removes
// it) and the key.
func (a *Archive) abortCopy(ctx context.Context, to, id string) error {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), copyAbortTimeout)
	defer cancel()
	if err := a.AbortUpload(actx, to, id); err != nil {
		return fmt.Errorf("the failed copy's multipart upload %s stays open: %w", id, err) // err names the key
	}
	return nil
}

const copyAbortTimeout = 10 * time.Second

// escapeKey escapes a key for the CopySource header, keeping slashes.
func escapeKey(k string) string {
	parts := strings.Split(k, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// Delete implements parquet.Deleter with DeleteObjects (1000 per request).
func (a *Archive) Delete(ctx context.Context, names ...string) error {
	for _, n := range names {
		if err := a.checkName("delete", n); err != nil {
			return err
		}
	}
	if err := a.obj.deleteMany(ctx, names); err != nil {
		return fmt.Errorf("s3 archive: %w", err)
	}
	return nil
}

// ListPage implements parquet.PageLister with ListObjectsV2 StartAfter.
func (a *Archive) ListPage(ctx context.Context, prefix, startAfter string, limit int) ([]parquet.ObjectInfo, error) {
	in := &awss3.ListObjectsV2Input{Bucket: &a.obj.bucket, Prefix: aws.String(a.obj.key(prefix))}
	if startAfter != "" {
		in.StartAfter = aws.String(a.obj.key(startAfter))
	}
	return a.list(ctx, in, prefix, limit)
}

// list runs ListObjectsV2 pages from in until limit objects (<= 0: all).
func (a *Archive) list(ctx context.Context, in *awss3.ListObjectsV2Input, prefix string, limit int) ([]parquet.ObjectInfo, error) {
	var out []parquet.ObjectInfo
	for {
		if limit > 0 {
			in.MaxKeys = aws.Int32(int32(min(limit-len(out), 1000)))
		}
		page, err := a.obj.client.ListObjectsV2(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("s3 archive: %w", a.obj.wrap("list", prefix+"*", err))
		}
		for _, c := range page.Contents {
			name, ok := strings.CutPrefix(aws.ToString(c.Key), a.obj.prefix)
			if !ok || parquet.IsTempName(name) {
				continue // a temp file's name, which no archive takes (checkName)
			}
			out = append(out, parquet.ObjectInfo{Name: name, Size: aws.ToInt64(c.Size), ModTime: aws.ToTime(c.LastModified)})
		}
		if !aws.ToBool(page.IsTruncated) || (limit > 0 && len(out) >= limit) {
			return out, nil
		}
		// Without a token the rest cannot be asked for (files a backfill
		// or a compaction would miss).
		if err := a.obj.truncatedWithoutToken("list", prefix+"*", page); err != nil {
			return nil, fmt.Errorf("s3 archive: %w", err)
		}
		in.ContinuationToken = page.NextContinuationToken
		in.StartAfter = nil
	}
}
