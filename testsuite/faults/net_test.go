package faults

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNetCutAndHeal(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(io.Discard, c) }()
		}
	}()
	var n Net
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := n.GRPCDial(ctx, ln.Addr().String())
	require.NoError(t, err)
	n.Cut()
	_, err = c.Write([]byte("x"))
	require.Error(t, err, "a cut closes open connections")
	_, err = n.Dial(ctx, "tcp", ln.Addr().String())
	require.ErrorIs(t, err, ErrNetCut)
	n.Heal()
	c, err = n.Dial(ctx, "tcp", ln.Addr().String())
	require.NoError(t, err)
	_, err = c.Write([]byte("x"))
	require.NoError(t, err)
	n.Cut()
}
