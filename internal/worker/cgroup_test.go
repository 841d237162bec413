package worker

import (
	"bytes"
	"fmt"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	mountV2         = "30 22 0:27 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n"
	mountV1Memory   = "34 30 0:31 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
	mountV1CPU      = "31 30 0:28 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
	mountV2Unified  = "40 30 0:37 / /sys/fs/cgroup/unified rw,relatime shared:6 - cgroup2 cgroup2 rw\n"
	mountRootfs     = "22 1 253:1 / / rw,relatime - ext4 /dev/vda rw\n"
	unlimitedV1Text = "9223372036854771712\n"
)

func cgroupFS(files map[string]string) fstest.MapFS {
	fsys := fstest.MapFS{}
	for name, data := range files {
		fsys[name] = &fstest.MapFile{Data: []byte(data)}
	}
	return fsys
}

func TestContainerMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		name  string
		files map[string]string
		bytes int64 // 0: no limit found
		file  string
	}{
		{
			name: "v2 container, its own cgroup at the mount's root",
			files: map[string]string{
				"proc/self/mountinfo":       mountRootfs + mountV2,
				"proc/self/cgroup":          "0::/\n",
				"sys/fs/cgroup/memory.max":  "335544320\n",
				"sys/fs/cgroup/memory.high": "max\n",
			},
			bytes: 320 << 20, file: "/sys/fs/cgroup/memory.max",
		},
		{
			name: "v2 without a limit",
			files: map[string]string{
				"proc/self/mountinfo":      mountV2,
				"proc/self/cgroup":         "0::/\n",
				"sys/fs/cgroup/memory.max": "max\n",
			},
		},
		{
			name: "v2 host, the limit on a parent",
			files: map[string]string{
				"proc/self/mountinfo": mountV2,
				"proc/self/cgroup":    "0::/system.slice/tflo.service\n",
				"sys/fs/cgroup/system.slice/tflo.service/memory.max":    "max\n",
				"sys/fs/cgroup/system.slice/memory.max":                 "1073741824\n",
				"sys/fs/cgroup/system.slice/tflo.service/memory.events": "low 0\n",
			},
			bytes: 1 << 30, file: "/sys/fs/cgroup/system.slice/memory.max",
		},
		{
			name: "v2, the lowest of the cgroup and its parents",
			files: map[string]string{
				"proc/self/mountinfo":                    mountV2,
				"proc/self/cgroup":                       "0::/a/b\n",
				"sys/fs/cgroup/a/b/memory.max":           "536870912\n",
				"sys/fs/cgroup/a/memory.max":             "1073741824\n",
				"sys/fs/cgroup/a/b/cgroup.controllers":   "memory\n",
				"sys/fs/cgroup/a/cgroup.subtree_control": "memory\n",
			},
			bytes: 512 << 20, file: "/sys/fs/cgroup/a/b/memory.max",
		},
		{
			name: "v1 host, unlimited (this repository's CI machines)",
			files: map[string]string{
				"proc/self/mountinfo": mountRootfs + mountV1CPU + mountV1Memory,
				"proc/self/cgroup":    "9:name=systemd:/\n4:memory:/process_api/e532\n1:cpu:/\n0::/\n",
				"sys/fs/cgroup/memory/process_api/e532/memory.limit_in_bytes": unlimitedV1Text,
				"sys/fs/cgroup/memory/process_api/memory.limit_in_bytes":      unlimitedV1Text,
				"sys/fs/cgroup/memory/memory.limit_in_bytes":                  unlimitedV1Text,
			},
		},
		{
			name: "v1 host, a limit on the process's cgroup",
			files: map[string]string{
				"proc/self/mountinfo": mountV1CPU + mountV1Memory,
				"proc/self/cgroup":    "4:memory:/tflocap\n1:cpu:/\n",
				"sys/fs/cgroup/memory/tflocap/memory.limit_in_bytes":      "335544320\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes":              unlimitedV1Text,
				"sys/fs/cgroup/memory/tflocap/memory.soft_limit_in_bytes": "104857600\n",
			},
			bytes: 320 << 20, file: "/sys/fs/cgroup/memory/tflocap/memory.limit_in_bytes",
		},
		{
			name: "v1 container: the mount's root is the container's cgroup",
			files: map[string]string{
				"proc/self/mountinfo":                        "34 30 0:31 /docker/abc /sys/fs/cgroup/memory ro,relatime - cgroup cgroup rw,memory\n",
				"proc/self/cgroup":                           "4:memory:/docker/abc\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes": "268435456\n",
			},
			bytes: 256 << 20, file: "/sys/fs/cgroup/memory/memory.limit_in_bytes",
		},
		{
			name: "v1 container, a cgroup path outside the mount's view",
			files: map[string]string{
				"proc/self/mountinfo":                            "34 30 0:31 /docker/abc /sys/fs/cgroup/memory ro,relatime - cgroup cgroup rw,memory\n",
				"proc/self/cgroup":                               "4:memory:/docker/abcdef\n",
				"sys/fs/cgroup/memory/memory.limit_in_bytes":     "268435456\n",
				"sys/fs/cgroup/memory/def/memory.limit_in_bytes": "1048576\n",
			},
			bytes: 256 << 20, file: "/sys/fs/cgroup/memory/memory.limit_in_bytes",
		},
		{
			// A cgroup namespace shows a cgroup above its root as "/..":
			// joined to the mount point, it named folders outside the
			// mount, and no limit was found.
			name: "v2 container, a cgroup above the namespace's root",
			files: map[string]string{
				"proc/self/mountinfo":      mountV2,
				"proc/self/cgroup":         "0::/../init\n",
				"sys/fs/cgroup/memory.max": "268435456\n",
				"sys/fs/memory.max":        "1048576\n",
			},
			bytes: 256 << 20, file: "/sys/fs/cgroup/memory.max",
		},
		{
			name: "hybrid: v2 mounted without the memory controller, v1 has it",
			files: map[string]string{
				"proc/self/mountinfo":                                   mountV2Unified + mountV1Memory,
				"proc/self/cgroup":                                      "0::/user.slice\n4:memory:/user.slice\n",
				"sys/fs/cgroup/unified/user.slice/cgroup.procs":         "1\n",
				"sys/fs/cgroup/memory/user.slice/memory.limit_in_bytes": "2147483648\n",
			},
			bytes: 2 << 30, file: "/sys/fs/cgroup/memory/user.slice/memory.limit_in_bytes",
		},
		{
			name: "an escaped mount point",
			files: map[string]string{
				"proc/self/mountinfo":      `30 22 0:27 / /run/my\040cgroup rw - cgroup2 cgroup2 rw` + "\n",
				"proc/self/cgroup":         "0::/\n",
				"run/my cgroup/memory.max": "104857600\n",
			},
			bytes: 100 << 20, file: "/run/my cgroup/memory.max",
		},
		{
			name:  "no cgroup mounted",
			files: map[string]string{"proc/self/mountinfo": mountRootfs, "proc/self/cgroup": "0::/\n"},
		},
		{
			name:  "not Linux: no /proc",
			files: map[string]string{"etc/hostname": "mac\n"},
		},
		{
			name: "garbage in the limit file",
			files: map[string]string{
				"proc/self/mountinfo":      mountV2,
				"proc/self/cgroup":         "0::/\n",
				"sys/fs/cgroup/memory.max": "lots\n",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim, ok := containerMemoryLimit(cgroupFS(tc.files))
			if tc.bytes == 0 {
				assert.False(t, ok, "no limit: %+v", lim)
				return
			}
			require.True(t, ok, "the limit %d in %s", tc.bytes, tc.file)
			assert.Equal(t, tc.bytes, lim.bytes)
			assert.Equal(t, tc.file, lim.file)
		})
	}
}

func TestCheckContainerLimit(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, nil))
	lim := containerLimit{bytes: 320 << 20, file: "/sys/fs/cgroup/memory.max"}

	checkContainerLimit(lim, true, 384<<20, log)
	assert.Contains(t, out.String(), "level=WARN")
	assert.Contains(t, out.String(), "not below the container's memory limit")
	assert.Contains(t, out.String(), "container_limit=320MiB from=/sys/fs/cgroup/memory.max go_limit=384MiB")

	out.Reset()
	checkContainerLimit(lim, true, math.MaxInt64, log)
	assert.Contains(t, out.String(), "level=WARN", "no Go limit at all is above any container's")
	assert.Contains(t, out.String(), "go_limit=none")

	out.Reset()
	lim.bytes = 1 << 30
	checkContainerLimit(lim, true, 384<<20, log)
	assert.Contains(t, out.String(), "level=INFO")
	assert.Contains(t, out.String(), "container_limit=1GiB")
	assert.Contains(t, out.String(), "page_cache_room=640MiB")

	out.Reset()
	checkContainerLimit(containerLimit{}, false, 384<<20, log)
	assert.Empty(t, out.String(), "no container limit, nothing to say")
}

// TestContainerLimitInARealCgroup runs a child process in a memory cgroup
// of its own with a 320 MiB limit (under this process's cgroup), on the
// kernel's real /proc and cgroup files, and reads the child's log: a
// worker whose state.memory is 256 MiB (Go memory limit 384 MiB) warns.
// It needs root and a cgroup v1 memory hierarchy (or a v2 cgroup that
// delegates the memory controller), and skips otherwise.
func TestContainerLimitInARealCgroup(t *testing.T) {
	if os.Getenv("TFLO_CGROUP_CHILD") != "" {
		return // the child's part is TestChildAppliesMemoryLimit
	}
	parent, limitFile, ok := ownMemoryCgroup()
	if !ok {
		t.Skip("no memory cgroup of this process to make a child cgroup in (not Linux, or no cgroup v1 memory hierarchy)")
	}
	dir := filepath.Join(parent, fmt.Sprintf("tflo-test-%d", os.Getpid()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Skipf("cannot make a cgroup (needs root): %v", err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) }) // a cgroup is removed with rmdir, once empty
	if err := os.WriteFile(filepath.Join(dir, limitFile), []byte("335544320"), 0o644); err != nil {
		t.Skipf("cannot set the cgroup's memory limit: %v", err)
	}
	cmd := exec.Command("sh", "-c", `echo $$ > "$0/cgroup.procs" && exec "$1" -test.run '^TestChildAppliesMemoryLimit$' -test.count=1`, dir, os.Args[0])
	cmd.Env = append(os.Environ(), "TFLO_CGROUP_CHILD=1", "GOMEMLIMIT=")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "level=WARN msg=\"the Go memory limit is not below the container's memory limit")
	assert.Contains(t, string(out), "container_limit=320MiB from="+filepath.Join(dir, limitFile)+" go_limit=384MiB")
}

// TestChildAppliesMemoryLimit is the child of TestContainerLimitInARealCgroup.
func TestChildAppliesMemoryLimit(t *testing.T) {
	if os.Getenv("TFLO_CGROUP_CHILD") == "" {
		t.Skip("run by TestContainerLimitInARealCgroup")
	}
	applyMemoryLimit(256<<20, slog.New(slog.NewTextHandler(os.Stdout, nil)))
}

// ownMemoryCgroup returns the folder of this process's memory cgroup in
// the cgroup v1 memory hierarchy, or in cgroup v2 when that cgroup
// delegates the memory controller, and the limit's file.
func ownMemoryCgroup() (dir, limitFile string, ok bool) {
	for _, g := range memoryCgroups(os.DirFS("/")) {
		switch g.file {
		case "memory.limit_in_bytes":
			if _, err := os.Stat(filepath.Join(g.dir, g.file)); err == nil {
				return g.dir, g.file, true
			}
		case "memory.max":
			ctl, err := os.ReadFile(filepath.Join(g.dir, "cgroup.subtree_control"))
			if err == nil && slices.Contains(strings.Fields(string(ctl)), "memory") {
				return g.dir, g.file, true
			}
		}
	}
	return "", "", false
}
