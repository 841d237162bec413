package streaming_test

import (
	"errors"
	"fmt"

	"github.com/tflo-io/tflo/streaming"
)

func ExampleMarshalSnapshot() {
	snap := streaming.Snapshot{
		Meta: streaming.SnapshotMeta{
			CursorType: streaming.CursorTypeKafka,
			Cursor:     streaming.KafkaOffset{Topic: "readings", Partition: 3, Offset: 1041}.Bytes(),
			Epoch:      7,
		},
		Data: []byte("state"),
	}
	b := streaming.MarshalSnapshot(snap)

	got, err := streaming.UnmarshalSnapshot(b)
	if err != nil {
		panic(err)
	}
	off, _ := streaming.ParseKafkaOffset(got.Meta.Cursor)
	fmt.Println(got.Meta.FormatVersion, off, off.Next(), string(got.Data))

	b[len(b)/2] ^= 1 // a flipped bit is refused, never decoded
	_, err = streaming.UnmarshalSnapshot(b)
	fmt.Println(errors.Is(err, streaming.ErrCorrupt))
	// Output:
	// 1 readings/3@1041 1042 state
	// true
}

func ExampleMQTTCursor() {
	cur, err := streaming.NewMQTTCursor(2, 0) // a tiny window to show eviction
	if err != nil {
		panic(err)
	}
	apply := func(topic string, packetID uint16, payload string) {
		id := streaming.MQTTMessageID(topic, packetID, []byte(payload))
		if cur.Observe(id, packetID) {
			fmt.Println("skip redelivery of", payload)
			return
		}
		fmt.Println("apply", payload)
	}
	apply("s/1", 1, "20.5")
	apply("s/1", 1, "20.5") // broker redelivers: skipped
	apply("s/1", 2, "20.7")
	apply("s/1", 3, "20.9") // window full: evicts the oldest id (20.5)
	apply("s/1", 1, "20.5") // a very late redelivery is no longer recognised
	fmt.Println(cur)

	restored, _ := streaming.ParseMQTTCursor(cur.Bytes())
	apply = func(topic string, packetID uint16, payload string) {
		fmt.Println("restored cursor skips", payload, restored.Observe(streaming.MQTTMessageID(topic, packetID, []byte(payload)), packetID))
	}
	apply("s/1", 1, "20.5")
	// Output:
	// apply 20.5
	// skip redelivery of 20.5
	// apply 20.7
	// apply 20.9
	// apply 20.5
	// mqtt last-packet=1 window=2/2 retained=0/4096
	// restored cursor skips 20.5 true
}
