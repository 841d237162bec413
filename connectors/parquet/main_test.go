package parquet_test

import (
	"testing"

	"github.com/tflo-io/tflo/internal/benchratio"
)

func TestMain(m *testing.M) {
	benchratio.Main(m, benchratio.Baselines{
		"BenchmarkArchiveWrite": {"plain-parquet-go-write": plainWrite},
		"BenchmarkArchiveRead":  {"plain-parquet-go-read": plainRead},
	})
}
