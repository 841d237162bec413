package loopport

import (
	"errors"
	"net"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPickBelowTheEphemeralRange: a picked port is free (it binds) and
// below the range the kernel gives outgoing connections and :0 listeners
// their ports from.
func TestPickBelowTheEphemeralRange(t *testing.T) {
	eph := ephemeralStart()
	for range 20 {
		addr, err := Pick()
		require.NoError(t, err)
		host, ps, err := net.SplitHostPort(addr)
		require.NoError(t, err)
		require.Equal(t, "127.0.0.1", host)
		p, err := strconv.Atoi(ps)
		require.NoError(t, err)
		require.GreaterOrEqual(t, p, lowest)
		require.Less(t, p, eph, "port %d is in the ephemeral range starting at %d", p, eph)
		l, err := net.Listen("tcp", addr)
		require.NoError(t, err, "the picked port %d is not free", p)
		require.NoError(t, l.Close())
	}
	// A :0 listener's port is in the range Pick avoids.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	require.GreaterOrEqual(t, l.Addr().(*net.TCPAddr).Port, eph)
}

// TestInUse recognises a taken port in what the servers print.
func TestInUse(t *testing.T) {
	// The texts the servers tflo starts print when their port is taken.
	for _, msg := range []string{
		`failed listening for HTTP API on 127.0.0.1:39377: listen tcp 127.0.0.1:39377: bind: address already in use`, // temporal
		`run: open server: open service: listen tcp 127.0.0.1:8086: bind: address already in use`,                    // influxd
		`1733101010: Error: Address already in use`,                                                                  // mosquitto
	} {
		require.True(t, InUse(msg), msg)
	}
	require.False(t, InUse("connection refused"))
	// The error a real listener gives on a taken port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	_, err = net.Listen("tcp", l.Addr().String())
	require.Error(t, err)
	require.True(t, InUse(err.Error()), err.Error())
}

// TestRetry: a start that finds its port taken is called again, four
// times at most; one that fails otherwise, or succeeds, is not.
func TestRetry(t *testing.T) {
	taken := errors.New("listen tcp 127.0.0.1:20001: bind: address already in use")
	calls := 0
	_, err := Retry(func() (int, error) { calls++; return 0, taken }, nil)
	require.ErrorIs(t, err, taken)
	require.Equal(t, attempts, calls)

	calls = 0
	v, err := Retry(func() (int, error) {
		calls++
		if calls == 2 {
			return 7, nil
		}
		return 0, taken
	}, nil)
	require.NoError(t, err)
	require.Equal(t, 7, v)
	require.Equal(t, 2, calls)

	calls = 0
	other := errors.New("no such database")
	_, err = Retry(func() (int, error) { calls++; return 0, other }, nil)
	require.ErrorIs(t, err, other)
	require.Equal(t, 1, calls)

	calls = 0
	_, err = Retry(func() (int, error) { calls++; return 0, taken }, func(error) bool { return false })
	require.ErrorIs(t, err, taken)
	require.Equal(t, 1, calls, "the caller's predicate decides")
}
