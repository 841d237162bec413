package keyedstate_test

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/dgraph-io/badger/v4"
	"github.com/tflo-io/tflo/streaming"
	"github.com/tflo-io/tflo/streaming/keyedstate"
	"github.com/tflo-io/tflo/streaming/ops"
	"github.com/tflo-io/tflo/streaming/state/memory"
)

// A keyed SMA over sensors, checkpointed in-process and restored into a
// fresh runtime (a restarted worker) that resumes after the cursor.
func Example() {
	ctx := context.Background()
	g, _ := streaming.NewBuilder().
		Input("value").
		Node("smooth", func() streaming.Operator { return ops.NewSMA(2) }, "value").
		Build()
	const budget = 16 << 20 // the runtime and its Badger together
	openDB := func() *badger.DB {
		// In production: keyedstate.BadgerOptions(dir, budget).
		db, err := badger.Open(keyedstate.BadgerOptions("", budget).WithInMemory(true).WithLogger(nil))
		if err != nil {
			panic(err)
		}
		return db
	}
	durable := memory.New() // a StateStore and CursorStore; use files or badger in production

	db := openDB()
	defer db.Close()
	rt, err := keyedstate.New[string](g, keyedstate.StringKeys{}, db, keyedstate.WithMemoryBudget(budget), keyedstate.WithWriteBatchBytes(1<<20))
	if err != nil {
		panic(err)
	}
	cp, _ := streaming.NewCheckpointer("sensors/0", rt, durable, durable)
	readings := []struct {
		sensor string
		value  float64
	}{{"a", 10}, {"b", 1}, {"a", 20}, {"b", 3}, {"a", 40}}
	offset := func(i int) []byte { return binary.BigEndian.AppendUint64(nil, uint64(i)) }
	for i, r := range readings[:4] {
		_, _ = rt.Apply(r.sensor, int64(i), "offset", offset(i), streaming.Float(r.value))
	}
	res, err := cp.Checkpoint(ctx)
	fmt.Println("checkpoint", res.ID, "at offset", binary.BigEndian.Uint64(res.Cursor), err)
	_ = rt.Close()

	// The worker restarts: restore, then resume after the cursor.
	db2 := openDB()
	defer db2.Close()
	rt2, err := keyedstate.New[string](g, keyedstate.StringKeys{}, db2, keyedstate.WithMemoryBudget(budget), keyedstate.WithWriteBatchBytes(1<<20))
	if err != nil {
		panic(err)
	}
	defer rt2.Close()
	cp2, _ := streaming.NewCheckpointer("sensors/0", rt2, durable, durable)
	info, err := cp2.Restore(ctx)
	next := int(binary.BigEndian.Uint64(info.Cursor)) + 1
	fmt.Println("restored checkpoint", info.ID, "resume at offset", next, err)
	for i := next; i < len(readings); i++ {
		r := readings[i]
		in, _ := rt2.Apply(r.sensor, int64(i), "offset", offset(i), streaming.Float(r.value))
		fmt.Println(r.sensor, "smoothed", in.Output(0))
	}
	// Output:
	// checkpoint 1 at offset 3 <nil>
	// restored checkpoint 1 resume at offset 4 <nil>
	// a smoothed 30
}
