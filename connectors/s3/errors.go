package s3

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/tflo-io/tflo/streaming"
)

// ErrAccessDenied is wrapped by errors for requests the server refused
// because of the credentials (wrong access key or secret, expired token,
// missing permission). The message names the bucket and endpoint, never
// the secret.
var ErrAccessDenied = errors.New("access denied")

// ErrNoCredentials is wrapped by errors for requests that could not be
// signed: no credentials were given (WithStaticCredentials) and the
// standard credential chain (environment, shared files, SSO, instance
// roles) found none. The request never reached the server.
var ErrNoCredentials = errors.New("no credentials found: none given, and the standard credential chain (environment, shared files, SSO, instance roles) found none")

// ErrNoSuchBucket is wrapped by errors for requests to a bucket that does
// not exist on the endpoint.
var ErrNoSuchBucket = errors.New("no such bucket")

// ErrConflict is wrapped by a commit that lost a race for its manifest:
// the manifest changed on the server since this Store read it, or was
// being changed (another writer of the same shard, or of the root
// manifest; 412, or AWS's 409 ConditionalRequestConflict), so the commit was
// refused and changed nothing. The Store forgets its cached manifest; a
// retry reads the winner's. It is streaming.ErrConflict, which the other
// stores' conditional saves (streaming.ConditionalSaver) return too. It
// does not wrap streaming.ErrFenced: losing a race does not make a writer
// the stale one (see the package doc).
var ErrConflict = streaming.ErrConflict

// ErrResponseTimeout is wrapped by errors for requests the server accepted
// but did not answer within the response timeout (WithResponseTimeout)
// on any attempt. The message names the object and the timeout.
var ErrResponseTimeout = errors.New("the server did not answer within the response timeout")

// isResponseTimeout reports an attempt that gave up waiting for the
// response headers (the transport's ResponseHeaderTimeout; net/http's
// error has no exported type, its message is the one mark).
func isResponseTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() && strings.Contains(err.Error(), "timeout awaiting response headers")
}

// apiCode returns the S3 error code and HTTP status of err, if any.
func apiCode(err error) (code string, status int) {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		code = ae.ErrorCode()
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		status = re.HTTPStatusCode()
	}
	return code, status
}

// isNotFound reports a missing object. A 404 with another error code
// (NoSuchBucket, or versitygw's XAdminUserNotFound for an unknown access
// key) is not a missing object.
func isNotFound(err error) bool {
	code, status := apiCode(err)
	switch code {
	case "NoSuchKey", "NotFound":
		return true
	case "":
		return status == http.StatusNotFound // HEAD responses carry no error body
	}
	return false
}

// isPreconditionFailed reports a conditional PUT that lost a race: 412,
// or AWS's 409 ConditionalRequestConflict for a write racing another
// write of the object (to be reread and retried like a 412).
func isPreconditionFailed(err error) bool {
	code, status := apiCode(err)
	return code == "PreconditionFailed" || status == http.StatusPreconditionFailed || code == "ConditionalRequestConflict"
}

// classify wraps err with the package sentinel its S3 error code maps to.
func classify(err error) error {
	if errors.Is(err, ErrNoCredentials) {
		// Before apiCode: the metadata endpoint's own 403 is not the
		// server refusing the credentials.
		return err
	}
	code, status := apiCode(err)
	switch {
	case code == "NoSuchBucket":
		return fmt.Errorf("%w: %w", ErrNoSuchBucket, err)
	case code == "AccessDenied" || code == "SignatureDoesNotMatch" || code == "InvalidAccessKeyId" ||
		code == "InvalidToken" || code == "ExpiredToken" || code == "InvalidClientTokenId" ||
		code == "XAdminUserNotFound" ||
		status == http.StatusForbidden || status == http.StatusUnauthorized:
		return fmt.Errorf("%w (check the access key and secret): %w", ErrAccessDenied, err)
	}
	return err
}

// chainCredentials is the default credential chain, whose failure to find
// credentials wraps ErrNoCredentials (the SDK's own error says "failed to
// refresh cached credentials" and may carry the metadata endpoint's 403,
// which read as the server refusing the access key).
type chainCredentials struct{ aws.CredentialsProvider }

func (c chainCredentials) Retrieve(ctx context.Context) (aws.Credentials, error) {
	creds, err := c.CredentialsProvider.Retrieve(ctx)
	if err != nil {
		return creds, fmt.Errorf("%w: %w", ErrNoCredentials, err)
	}
	return creds, nil
}
