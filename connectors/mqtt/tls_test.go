package mqtt

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tflo-io/tflo/internal/tlsconfig"
	"github.com/tflo-io/tflo/testsuite/mqttbroker"
	"github.com/tflo-io/tflo/testsuite/tlstest"
)

func TestTLSWithCustomCAAndClientCertificate(t *testing.T) {
	pki := tlstest.New(t)
	b := startBroker(t, mqttbroker.Options{TLS: pki.ServerConfig()})
	tlsURL := "tls://" + b.addr

	t.Run("mutual TLS delivers", func(t *testing.T) {
		cfg, err := tlsconfig.Config{CAFile: pki.CAFile, CertFile: pki.ClientCertFile, KeyFile: pki.ClientKeyFile}.Build()
		require.NoError(t, err)
		s, err := NewSource(WithServers(tlsURL), WithClientID("edge-tls"), WithTopics("sensors/#"), WithTLS(cfg),
			WithBackoff(20*time.Millisecond, 200*time.Millisecond))
		require.NoError(t, err)
		var rec recorder
		runSource(t, s, rec.handle)
		waitSubscribed(t, s, 1)
		require.NoError(t, b.srv.Publish("sensors/t", reading("t", 1, 2), false, 2))
		require.Eventually(t, func() bool { return rec.len() == 1 }, waitFor, time.Millisecond)
	})
	t.Run("without a client certificate the broker refuses", func(t *testing.T) {
		cfg, err := tlsconfig.Config{CAFile: pki.CAFile}.Build()
		require.NoError(t, err)
		s, err := NewSource(WithServers(tlsURL), WithClientID("edge-tls-nocert"), WithTopics("sensors/#"), WithTLS(cfg),
			WithBackoff(20*time.Millisecond, 200*time.Millisecond))
		require.NoError(t, err)
		r := runSource(t, s, func(context.Context, Message) error { return nil })
		require.Eventually(t, func() bool { return s.Stats().ConnectErrors >= 2 }, waitFor, time.Millisecond)
		assert.Zero(t, s.Stats().Connects)
		require.NoError(t, r.stop(t))
	})
}
