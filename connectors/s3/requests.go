package s3

import (
	"context"
	"maps"
	"sync"

	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// RequestCounter counts the HTTP requests an S3 client sends, by
// operation name ("PutObject", "GetObject", "DeleteObjects", ...), and the
// request body bytes. It counts every attempt, retries included, because
// every attempt is billed. Register it with WithAPIOptions(c.Register);
// it is safe for concurrent use and is the hook a metrics backend reads.
type RequestCounter struct {
	mu    sync.Mutex
	ops   map[string]int64
	bytes int64
}

// Register adds the counting middleware to a client's stack, at the end of
// the finalize step (after retries and signing, once per attempt).
func (c *RequestCounter) Register(stack *middleware.Stack) error {
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("tflo/s3/RequestCounter",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			var n int64
			if req, ok := in.Request.(*smithyhttp.Request); ok && req.ContentLength > 0 {
				n = req.ContentLength
			}
			c.add(middleware.GetOperationName(ctx), n)
			return next.HandleFinalize(ctx, in)
		}), middleware.After)
}

func (c *RequestCounter) add(op string, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ops == nil {
		c.ops = make(map[string]int64)
	}
	c.ops[op]++
	c.bytes += n
}

// Count returns how many requests of operation op were sent.
func (c *RequestCounter) Count(op string) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ops[op]
}

// Counts returns a copy of all counts by operation name.
func (c *RequestCounter) Counts() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return maps.Clone(c.ops)
}

// BytesSent returns the request body bytes sent so far.
func (c *RequestCounter) BytesSent() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

// Reset sets every count to zero.
func (c *RequestCounter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ops = nil
	c.bytes = 0
}
