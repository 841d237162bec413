package edge

import "github.com/tflo-io/tflo/streaming"

// Mode is the alarm state a Signal reports.
type Mode string

// The modes of a Signal.
const (
	// Raised: the smoothed value rose above the high threshold and stayed
	// there for the dwell.
	Raised Mode = "raised"
	// Cleared: the smoothed value fell below the low threshold and stayed
	// there for the dwell.
	Cleared Mode = "cleared"
)

// Payload carries the values behind a Signal.
type Payload struct {
	Smoothed float64 `json:"smoothed"` // the SMA at the confirming record
	Raw      float64 `json:"raw"`      // the reading that confirmed the cross
	Topic    string  `json:"topic"`    // MQTT topic the reading came from
}

// Signal is what the edge leg publishes to Kafka, keyed by sensor id.
type Signal = streaming.Signal[Mode, Payload]
