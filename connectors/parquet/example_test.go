package parquet_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/tflo-io/tflo/connectors/parquet"
)

// Archive a shard's derived signals at checkpoint time, then replay them
// the way a backfill does, resuming after the first row.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "archive-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	archive, err := parquet.NewLocalArchive(dir)
	if err != nil {
		log.Fatal(err)
	}

	// Shard 3 of pipeline "iot", owned at epoch 7.
	w, err := parquet.NewWriter(archive, "iot", 3, 7, parquet.WithRowGroupRows(1024))
	if err != nil {
		log.Fatal(err)
	}
	err = w.Append(ctx,
		parquet.Row{Sensor: "boiler-1", Signal: "temp_sma", TS: 1_000, Mode: 0, Value: 20.5, Offset: 100},
		parquet.Row{Sensor: "boiler-1", Signal: "temp_alarm", TS: 1_000, Mode: 1, Value: 25.1, Offset: 100},
		parquet.Row{Sensor: "boiler-2", Signal: "temp_sma", TS: 2_000, Mode: 0, Value: 19.0, Offset: 101},
	)
	if err != nil {
		log.Fatal(err)
	}
	key, _, err := w.Flush(ctx) // before the checkpoint commits offset 101
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("wrote", key.Name())

	r, err := parquet.NewReader(archive, "iot/", parquet.WithExpectedFingerprint(parquet.SchemaFingerprint()))
	if err != nil {
		log.Fatal(err)
	}
	resume := parquet.Position{File: key.Name(), Row: 1} // e.g. from a heartbeat
	for e, err := range r.All(ctx, resume) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("row %d: %s %s mode=%d value=%g offset=%d\n", e.Pos.Row, e.Row.Sensor, e.Row.Signal, e.Row.Mode, e.Row.Value, e.Row.Offset)
	}
	// Output:
	// wrote iot/shard-000003/00000000000000000100-00000000000000000101-e00000000000000000007.parquet
	// row 1: boiler-1 temp_alarm mode=1 value=25.1 offset=100
	// row 2: boiler-2 temp_sma mode=0 value=19 offset=101
}
