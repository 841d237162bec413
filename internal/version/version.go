package version

import (
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// Version is set at link time:
//
//	go build -ldflags "-X github.com/tflo-io/tflo/internal/version.Version=v0.1.0" ./starter
//
// Empty (the default) means: use the main module's version from the build
// information.
var Version = ""

// Unknown is the version of a build that carries none (go test, go run
// outside a module version control checkout).
const Unknown = "(devel)"

// Info describes the running build.
type Info struct {
	// Version is the linker-stamped Version, else the main module's
	// version as Go recorded it (a tag or a pseudo-version, "+dirty" when
	// built from a modified tree), else Unknown.
	Version string `json:"version"`
	// GoVersion is the Go release that built the binary.
	GoVersion string `json:"go_version"`
	// Revision is the VCS commit the binary was built from ("" if Go
	// recorded none).
	Revision string `json:"revision,omitempty"`
	// Modified reports uncommitted changes in the tree it was built from.
	Modified bool `json:"modified,omitempty"`
}

// Get returns the running build's Info.
func Get() Info {
	bi, _ := debug.ReadBuildInfo()
	return fromBuildInfo(Version, bi)
}

func fromBuildInfo(stamped string, bi *debug.BuildInfo) Info {
	i := Info{Version: stamped, GoVersion: runtime.Version()}
	if bi == nil {
		if i.Version == "" {
			i.Version = Unknown
		}
		return i
	}
	if bi.GoVersion != "" {
		i.GoVersion = bi.GoVersion
	}
	if i.Version == "" {
		i.Version = bi.Main.Version
	}
	if i.Version == "" {
		i.Version = Unknown
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			i.Revision = s.Value
		case "vcs.modified":
			i.Modified = s.Value == "true"
		}
	}
	return i
}

// Line is the one-line form every binary prints for --version:
// "<name> v0.1.0 (go1.26.8, revision 1a2b3c4d5e6f, modified)".
func (i Info) Line(name string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s (%s", name, i.Version, i.GoVersion)
	if i.Revision != "" {
		rev := i.Revision
		if len(rev) > 12 {
			rev = rev[:12]
		}
		fmt.Fprintf(&b, ", revision %s", rev)
	}
	if i.Modified {
		b.WriteString(", modified")
	}
	b.WriteString(")")
	return b.String()
}

// Flag adds a --version switch to fs; after fs.Parse, a true value means
// the caller prints Get().Line(name) to stdout and exits 0.
func Flag(fs *flag.FlagSet) *bool {
	return fs.Bool("version", false, "print the version and exit")
}

// Collector returns the tflo_build_info gauge: always 1, with the labels
// version, go_version and revision of the running build. Register it once
// per registry.
func Collector() prometheus.Collector { return collector(Get()) }

func collector(i Info) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "tflo",
		Name:      "build_info",
		Help:      "The running build: always 1, labelled with its version, Go version and VCS revision.",
		ConstLabels: prometheus.Labels{
			"version":    i.Version,
			"go_version": i.GoVersion,
			"revision":   i.Revision,
		},
	})
	g.Set(1)
	return g
}
