package mqtt_test

import (
	"fmt"

	"github.com/tflo-io/tflo/connectors/mqtt"
)

func ExampleDecodeReading() {
	for _, payload := range []string{
		`{"sensor":"boiler-1","ts":1767225600000,"value":21.5}`,
		`{"sensor":"boiler-1","ts":"2026-01-01T00:00:01.5Z","value":22}`,
		`{"sensor":"boiler-1","value":22}`,
	} {
		r, err := mqtt.DecodeReading([]byte(payload))
		if err != nil {
			fmt.Println("dead letter:", err)
			continue
		}
		fmt.Printf("%s ts=%d value=%g\n", r.Sensor, r.TS, r.Value)
	}
	// Output:
	// boiler-1 ts=1767225600000 value=21.5
	// boiler-1 ts=1767225601500 value=22
	// dead letter: malformed reading: field "ts" is missing
}

func ExampleNewSource() {
	src, err := mqtt.NewSource(
		mqtt.WithServers("tls://broker.example:8883"),
		mqtt.WithClientID("edge-gw-1"),
		mqtt.WithTopics("sensors/+/temperature"),
		mqtt.WithSharedGroup("edge"),
		mqtt.WithCredentials("gateway", []byte("from-your-secret-store")),
	)
	fmt.Println(err, src.Stats().WindowCap)
	// src.Run(ctx, handler) connects and delivers until ctx is done.
	_, err = mqtt.NewSource(mqtt.WithServers("mqtt://broker.example:1883"))
	fmt.Println(err)
	// Output:
	// <nil> 4096
	// mqtt source: no client id: a persistent session needs a stable one, set WithClientID
	// no topic filters: set WithTopics
}
