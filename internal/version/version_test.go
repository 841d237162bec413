package version

import (
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestFromBuildInfo(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}
	cases := []struct {
		name     string
		stamped  string
		bi       *debug.BuildInfo
		want     Info
		wantLine string
	}{
		{"no build info", "", nil, Info{Version: Unknown}, "x (devel) (GO)"},
		{"linker stamp wins over the module version", "v1.2.3-4-gabc",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-2026-abc+dirty"}, Settings: vcs},
			Info{Version: "v1.2.3-4-gabc", GoVersion: "go1.26.8", Revision: "0123456789abcdef0123", Modified: true},
			"x v1.2.3-4-gabc (go1.26.8, revision 0123456789ab, modified)"},
		{"module version when not stamped", "",
			&debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.1.0"}},
			Info{Version: "v0.1.0", GoVersion: "go1.26.8"}, "x v0.1.0 (go1.26.8)"},
		{"(devel) when Go recorded no version", "",
			&debug.BuildInfo{GoVersion: "go1.26.8"}, Info{Version: Unknown, GoVersion: "go1.26.8"}, "x (devel) (go1.26.8)"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := fromBuildInfo(tc.stamped, tc.bi)
			if tc.want.GoVersion == "" {
				tc.want.GoVersion = got.GoVersion // runtime.Version(): whatever runs the test
				tc.wantLine = strings.Replace(tc.wantLine, "GO", got.GoVersion, 1)
			}
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.wantLine, got.Line("x"))
		})
	}
}

func TestCollectorIsBuildInfo(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	require.NoError(t, reg.Register(collector(Info{Version: "v9.9.9", GoVersion: "go1.26.8", Revision: "abc"})))
	want := `# HELP tflo_build_info The running build: always 1, labelled with its version, Go version and VCS revision.
# TYPE tflo_build_info gauge
tflo_build_info{go_version="go1.26.8",revision="abc",version="v9.9.9"} 1
`
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(want), "tflo_build_info"))
	// The exported constructor describes the running build.
	require.NoError(t, prometheus.NewRegistry().Register(Collector()))
}
