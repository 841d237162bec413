package devstack

import (
	"log/slog"

	"github.com/tflo-io/tflo/testsuite/mqttbroker"
)

// MQTT is an in-process MQTT v5 broker (mochi-mqtt) on loopback.
type MQTT = mqttbroker.Broker

// StartMQTT starts a broker on a free loopback port that accepts every
// client. log may be nil (discard).
func StartMQTT(log *slog.Logger) (*MQTT, error) {
	return mqttbroker.Start(mqttbroker.Options{Logger: log})
}
