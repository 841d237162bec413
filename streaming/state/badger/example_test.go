package badgerstore_test

import (
	"context"
	"fmt"
	"os"

	"github.com/dgraph-io/badger/v4"

	"github.com/tflo-io/tflo/streaming"
	badgerstore "github.com/tflo-io/tflo/streaming/state/badger"
)

// The store shares the database of the keyed hot state, under its own
// key prefix.
func ExampleWithDB() {
	dir, _ := os.MkdirTemp("", "tflo-badger-")
	defer os.RemoveAll(dir)
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		panic(err)
	}
	defer db.Close()

	s, err := badgerstore.Open(badgerstore.WithDB(db), badgerstore.WithPrefix([]byte("ckpt/")))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	_ = s.Save(ctx, []byte("sensor/1"), streaming.Snapshot{Data: []byte("21.5")})
	keys, _ := s.ListKeys(ctx)
	fmt.Printf("%q\n", keys)
	// Output: ["sensor/1"]
}
