package memory_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/state/memory"
)

func ExampleNew() {
	ctx := context.Background()
	s := memory.New()
	_ = s.Save(ctx, []byte("sensor/1"), streaming.Snapshot{Data: []byte("21.5")})
	snap, _ := s.Load(ctx, []byte("sensor/1"))
	fmt.Println(string(snap.Data))

	_, err := s.Load(ctx, []byte("sensor/2"))
	fmt.Println(errors.Is(err, streaming.ErrNotFound), err)

	_ = s.SaveCursor(ctx, []byte("p3"), streaming.CursorRecord{Type: streaming.CursorTypeKafka, Epoch: 2})
	err = s.SaveCursor(ctx, []byte("p3"), streaming.CursorRecord{Type: streaming.CursorTypeKafka, Epoch: 1})
	fmt.Println(errors.Is(err, streaming.ErrFenced))
	// Output:
	// 21.5
	// true snapshot key "sensor/2": not found
	// true
}
