package chaos

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReadLinesPastTheScannerLimit: the workers' stderr readers read with
// bufio.Scanner, which stops at a line over its limit (64 KiB for the
// edge, 1 MiB for the central workers): the lines after it (the "mqtt
// subscribed" the edge test waits for) were never seen, and nothing read
// the pipe any more, so the worker blocked writing its log.
// readLines passes every line on, however long, and reads to the end.
func TestReadLinesPastTheScannerLimit(t *testing.T) {
	r, w := io.Pipe()
	long := strings.Repeat("x", 2<<20) // over the edge's old limit (64 KiB) and the central workers' (1 MiB)
	wrote := make(chan error, 1)
	go func() {
		_, err := io.WriteString(w, "level=INFO msg=start\n"+long+"\nlevel=INFO msg=\"mqtt subscribed\"\nlast")
		if err == nil {
			err = w.Close()
		}
		wrote <- err
	}()
	var got []string
	read := make(chan struct{})
	go func() {
		defer close(read)
		readLines(r, func(l string) { got = append(got, l) })
	}()
	select {
	case err := <-wrote:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		_ = r.CloseWithError(io.ErrClosedPipe) // unblock the writer
		t.Fatal("the writer is still blocked after 10s: the reader stopped reading")
	}
	<-read
	require.Equal(t, []string{"level=INFO msg=start", long, `level=INFO msg="mqtt subscribed"`, "last"}, got)
}
