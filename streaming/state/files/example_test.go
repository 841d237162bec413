package files_test

import (
	"context"
	"fmt"
	"os"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/files"
)

func ExampleOpen() {
	dir, _ := os.MkdirTemp("", "tflo-state-")
	defer os.RemoveAll(dir)

	s, err := files.Open(dir)
	if err != nil {
		panic(err)
	}
	defer s.Close()
	ctx := context.Background()
	err = s.SaveBatch(ctx, []streaming.KeyedSnapshot{
		{Key: []byte("sensor/1"), Snapshot: streaming.Snapshot{Data: []byte("21.5")}},
		{Key: []byte("sensor/2"), Snapshot: streaming.Snapshot{Data: []byte("19.0")}},
	})
	if err != nil {
		panic(err)
	}
	snap, _ := s.Load(ctx, []byte("sensor/2"))
	fmt.Println(string(snap.Data))
	// Output: 19.0
}
