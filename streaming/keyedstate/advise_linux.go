//go:build linux

package keyedstate

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

// Badger reads its tables and value-log files through file mappings and
// never advises them, so a page fault on a mapped file that is not in the
// page cache reads around the page by the disk's read-ahead
// (read_ahead_kb: 8 MiB on the test VM). A miss of the cache is a point
// read, and when the page cache has no room for Badger's files (a
// container limit counts it) each one read megabytes: 10M keys under a
// 320 MiB limit read 1.2 TB from disk in 23 minutes without finishing
// BenchmarkPerEvent. The runtime therefore advises every mapping of the
// DB's .sst and .vlog files for random access (MADV_RANDOM, what RocksDB
// does by default on open): a fault then reads the page it needs. Under
// the same limit the benchmark then read 74 GB in 30 minutes, and did not
// finish either: a runtime whose misses read the disk runs at the disk's
// speed; the advice only stops each fault reading megabytes. Compactions read
// tables from start to end, so a table no longer in the page cache is
// read a page a fault; where the page cache holds the files (the machine
// has the memory) no fault reads the disk and the advice changes no time
// (see BenchmarkPerEvent).
//
// Badger maps a file when it opens or creates it, so a sweep of the
// process's mappings (/proc/self/maps) every adviseEvery advises the new
// ones. A mapping unmapped between the sweep's read and its madvise, and
// its range mapped again by something else, gets the advice too: a hint
// that changes nothing for anonymous memory (there is no swap to read
// ahead from) and is wanted for another of Badger's files.

// adviseEvery is how often the advisor looks for new mappings.
const adviseEvery = time.Second

// mapAdvisor advises the mappings of one DB's files.
type mapAdvisor struct {
	dirs    []string          // the DB's folders (Dir, ValueDir), absolute, links resolved
	advised map[mapRange]bool // mappings advised, as of the last sweep
	stop    chan struct{}
	done    chan struct{}
}

// mapRange is one mapping of one file.
type mapRange struct {
	start, end uint64
	inode      uint64
}

// startAdvisor advises the mappings of the .sst and .vlog files in dirs
// now and every adviseEvery until stopped.
func startAdvisor(dirs ...string) *mapAdvisor {
	a := &mapAdvisor{advised: map[mapRange]bool{}, stop: make(chan struct{}), done: make(chan struct{})}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		// The kernel names a mapped file by its absolute path, links
		// resolved.
		if abs, err := filepath.Abs(d); err == nil {
			d = abs
		}
		if real, err := filepath.EvalSymlinks(d); err == nil {
			d = real
		}
		a.dirs = append(a.dirs, filepath.Clean(d))
	}
	go a.run()
	return a
}

func (a *mapAdvisor) run() {
	defer close(a.done)
	t := time.NewTicker(adviseEvery)
	defer t.Stop()
	for {
		a.sweep()
		select {
		case <-a.stop:
			return
		case <-t.C:
		}
	}
}

// close stops the advisor and waits for it.
func (a *mapAdvisor) close() {
	close(a.stop)
	<-a.done
}

// sweep advises the DB files' mappings not advised yet, and forgets the
// ones gone.
func (a *mapAdvisor) sweep() {
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return
	}
	seen := make(map[mapRange]bool, len(a.advised))
	for line := range bytes.Lines(maps) {
		m, path, ok := parseMapping(line)
		if !ok || !a.owns(path) {
			continue
		}
		if !a.advised[m] {
			_, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(m.start), uintptr(m.end-m.start), unix.MADV_RANDOM)
			if errno != 0 {
				continue // unmapped since the read: the next sweep no longer sees it
			}
		}
		seen[m] = true
	}
	a.advised = seen
}

// owns reports whether path is a table or value-log file of the DB.
func (a *mapAdvisor) owns(path string) bool {
	if ext := filepath.Ext(path); ext != ".sst" && ext != ".vlog" {
		return false
	}
	dir := filepath.Dir(path)
	for _, d := range a.dirs {
		if d == dir {
			return true
		}
	}
	return false
}

// parseMapping parses one line of /proc/self/maps: "start-end perms
// offset dev inode path" (path absent for anonymous memory; a path may
// hold spaces). ok is false for a line without a path or one that does
// not parse.
func parseMapping(line []byte) (m mapRange, path string, ok bool) {
	line = bytes.TrimRight(line, "\n")
	fields := make([][]byte, 0, 6)
	rest := line
	for len(fields) < 5 {
		rest = bytes.TrimLeft(rest, " ")
		i := bytes.IndexByte(rest, ' ')
		if i < 0 {
			return m, "", false
		}
		fields = append(fields, rest[:i])
		rest = rest[i:]
	}
	rest = bytes.TrimLeft(rest, " ")
	if len(rest) == 0 || rest[0] != '/' {
		return m, "", false
	}
	lo, hi, found := bytes.Cut(fields[0], []byte{'-'})
	if !found {
		return m, "", false
	}
	var err1, err2, err3 error
	m.start, err1 = strconv.ParseUint(string(lo), 16, 64)
	m.end, err2 = strconv.ParseUint(string(hi), 16, 64)
	m.inode, err3 = strconv.ParseUint(string(fields[4]), 10, 64)
	if err1 != nil || err2 != nil || err3 != nil || m.end <= m.start {
		return m, "", false
	}
	return m, string(rest), true
}
