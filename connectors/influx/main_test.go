package influx_test

import (
	"testing"

	"github.com/tflo-io/tflo/internal/benchratio"
)

func TestMain(m *testing.M) {
	benchratio.Main(m, map[string]func(*testing.B){"raw-http-post": rawPost})
}
