package parquet

import (
	"reflect"
	"testing"

	"github.com/parquet-go/parquet-go/format"
)

// TestThriftStructCost: the walker charges every struct in a list
// thriftStructCost bytes, so that must be at least the size of every
// parquet-go format struct an archive footer or page header holds in a
// list (a parquet-go upgrade growing one fails here).
func TestThriftStructCost(t *testing.T) {
	for _, v := range []any{
		format.RowGroup{}, format.ColumnChunk{}, format.SchemaElement{}, format.KeyValue{}, format.ColumnOrder{},
		format.SortingColumn{}, format.PageEncodingStats{}, format.PageLocation{},
	} {
		if n := reflect.TypeOf(v).Size(); n > thriftStructCost {
			t.Errorf("%T is %d bytes, the walker charges %d", v, n, thriftStructCost)
		}
	}
}
