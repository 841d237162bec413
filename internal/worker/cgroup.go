package worker

import (
	"io/fs"
	"path"
	"strconv"
	"strings"
)

// containerLimit is the memory limit of the cgroup a process runs in.
type containerLimit struct {
	bytes int64  // the lowest limit on the way from the process's cgroup up to its mount
	file  string // the file that set it, e.g. /sys/fs/cgroup/memory.max
}

// unlimitedV1: cgroup v1 reports no limit as the largest page multiple
// of a signed 64-bit integer (9223372036854771712); anything this large
// is no limit.
const unlimitedV1 = int64(1) << 62

// containerMemoryLimit finds the memory limit of the cgroup the process
// runs in, reading /proc/self/mountinfo, /proc/self/cgroup and the
// cgroup files from root (os.DirFS("/") in production): cgroup v2's
// memory.max, or v1's memory.limit_in_bytes, the lowest of the cgroup's
// and its ancestors' up to the hierarchy's mount (inside a container, the
// container's own cgroup is the mount's root). ok is false when there is
// no limit or the files cannot be read (not Linux, no cgroup mounted).
func containerMemoryLimit(root fs.FS) (lim containerLimit, ok bool) {
	for _, g := range memoryCgroups(root) {
		if l, ok := g.lowestLimit(root); ok {
			return l, true
		}
	}
	return lim, false
}

// memoryCgroup is a cgroup the process is in, in a hierarchy that may
// hold the memory controller.
type memoryCgroup struct {
	dir   string // the cgroup's folder, e.g. /sys/fs/cgroup/system.slice/tflo.service
	point string // where its hierarchy is mounted, e.g. /sys/fs/cgroup
	file  string // its limit's file: memory.max (v2) or memory.limit_in_bytes (v1)
}

// memoryCgroups returns the process's cgroups in the cgroup v2 hierarchy
// and the v1 memory hierarchy, in /proc/self/cgroup's order, read from
// root: their folders under the mounts /proc/self/mountinfo names (a
// cgroup outside the mount's view, in a container, is the mount's root).
func memoryCgroups(root fs.FS) []memoryCgroup {
	mounts, err := fs.ReadFile(root, "proc/self/mountinfo")
	if err != nil {
		return nil
	}
	groups, err := fs.ReadFile(root, "proc/self/cgroup")
	if err != nil {
		return nil
	}
	type mount struct{ root, point string }
	var v1, v2 *mount
	for line := range strings.Lines(string(mounts)) {
		// ID parent major:minor root mount-point options [tags] - fstype source super-options
		before, after, found := strings.Cut(strings.TrimSpace(line), " - ")
		f, g := strings.Fields(before), strings.Fields(after)
		if !found || len(f) < 5 || len(g) < 3 {
			continue
		}
		m := &mount{root: path.Clean(unescapeMount(f[3])), point: path.Clean(unescapeMount(f[4]))}
		switch {
		case g[0] == "cgroup2" && v2 == nil:
			v2 = m
		case g[0] == "cgroup" && v1 == nil && hasOption(g[2], "memory"):
			v1 = m
		}
	}
	var out []memoryCgroup
	for line := range strings.Lines(string(groups)) {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(strings.TrimSpace(line), ":", 3)
		if len(parts) != 3 {
			continue
		}
		var m *mount
		var file string
		switch {
		case parts[0] == "0" && parts[1] == "" && v2 != nil:
			m, file = v2, "memory.max"
		case hasOption(parts[1], "memory") && v1 != nil:
			m, file = v1, "memory.limit_in_bytes"
		default:
			continue
		}
		dir := m.point
		if m.root == "/" {
			// A cgroup namespace names a cgroup above its root "/..":
			// outside the mount's view too, not a folder beside it.
			if p := parts[2]; p != "/.." && !strings.HasPrefix(p, "/../") {
				dir = path.Join(m.point, p)
			}
		} else if rel, ok := strings.CutPrefix(path.Clean(parts[2]), m.root); ok && (rel == "" || rel[0] == '/') {
			dir = path.Join(m.point, rel)
		}
		out = append(out, memoryCgroup{dir: dir, point: m.point, file: file})
	}
	return out
}

// lowestLimit reads the limit's file in the cgroup and in each of its
// ancestors up to the mount, and returns the lowest limit found.
func (g memoryCgroup) lowestLimit(root fs.FS) (containerLimit, bool) {
	var best containerLimit
	for dir := g.dir; ; dir = path.Dir(dir) {
		name := path.Join(dir, g.file)
		if b, err := fs.ReadFile(root, strings.TrimPrefix(name, "/")); err == nil {
			s := strings.TrimSpace(string(b))
			if n, err := strconv.ParseInt(s, 10, 64); err == nil && n > 0 && n < unlimitedV1 && (best.bytes == 0 || n < best.bytes) {
				best = containerLimit{bytes: n, file: name}
			}
		}
		if dir == g.point || dir == "/" || dir == "." {
			break
		}
	}
	return best, best.bytes > 0
}

// hasOption reports whether the comma-separated list has opt.
func hasOption(list, opt string) bool {
	for o := range strings.SplitSeq(list, ",") {
		if o == opt {
			return true
		}
	}
	return false
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
