package influx_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/tflo-io/tflo/connectors/influx"
	"github.com/tflo-io/tflo/streaming"
)

func ExampleSignalPoint() {
	s := streaming.Signal[streaming.Mode, float64]{Key: "boiler-1", TS: 1_767_225_600_000_000_000, Mode: 1, Payload: 25.1}
	modes := func(m streaming.Mode) string { return [...]string{"normal", "alarm"}[m] }
	line, err := influx.AppendLine(nil, influx.SignalPoint("temp_alarm", s, modes))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(string(line))
	// Output:
	// temp_alarm,mode=alarm,sensor=boiler-1 value=25.1 1767225600000000000
}

// The same sink against InfluxDB 1.8+ and 2.x: only the bucket, org and
// token differ.
func ExampleNewSink() {
	// InfluxDB 1.8+: bucket "database/retention-policy", no org, token
	// "user:password" (here from $TFLO_INFLUX_TOKEN, e.g. "writer:secret").
	v1, err := influx.NewSink("http://127.0.0.1:8086", "iot/autogen",
		influx.WithTokenFromEnv("TFLO_INFLUX_TOKEN"),
		influx.WithBatchSize(5000), influx.WithFlushInterval(time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer v1.Close(context.Background())

	// InfluxDB 2.x: bucket name, organization, API token.
	v2, err := influx.NewSink("https://influx.example.com", "iot",
		influx.WithOrg("acme"), influx.WithTokenFromEnv("TFLO_INFLUX_TOKEN"))
	if err != nil {
		log.Fatal(err)
	}
	defer v2.Close(context.Background())
}
