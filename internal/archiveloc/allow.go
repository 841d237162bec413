package archiveloc

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"
)

// Within reports whether l is root or inside it: for file://, a folder
// under root's folder (both cleaned, so "/a/../b" is "/b"); for s3://,
// the same bucket and a prefix under root's, path segment by segment
// (s3://b/prod allows s3://b/prod/x, not s3://b/production).
func (l Location) Within(root Location) bool {
	if l.Scheme != root.Scheme {
		return false
	}
	switch l.Scheme {
	case "file":
		return under(path.Clean(l.Dir), path.Clean(root.Dir))
	case "s3":
		return l.Bucket == root.Bucket && under(path.Clean("/"+l.Prefix), path.Clean("/"+root.Prefix))
	}
	return false
}

// under reports whether the clean absolute path p is dir or below it.
func under(p, dir string) bool {
	return dir == "/" || p == dir || strings.HasPrefix(p, dir+"/")
}

// ParseRoots parses an allowlist of archive roots; key names the setting
// in errors.
func ParseRoots(key string, roots []string) ([]Location, error) {
	out := make([]Location, 0, len(roots))
	for _, r := range roots {
		loc, err := Parse(r)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", key, err)
		}
		out = append(out, loc)
	}
	return out, nil
}

// Allowed returns nil when loc is within one of roots, else an error
// naming the location, the allowlist and key, the setting that holds it.
// A file:// location and root are compared by their real paths (symlinks
// resolved where they exist): a link inside an allowed folder that points
// out of it is not in it.
func Allowed(loc Location, roots []Location, key string) error {
	names := make([]string, len(roots))
	real := resolved(loc)
	for i, r := range roots {
		if loc.Within(r) && real.Within(resolved(r)) {
			return nil
		}
		names[i] = r.String()
	}
	if len(roots) == 0 {
		return fmt.Errorf("archive location %s is not allowed: %s is empty, so no archive is", loc, key)
	}
	return fmt.Errorf("archive location %s is not allowed: it is under none of %s [%s]", loc, key, strings.Join(names, ", "))
}

// resolved is l with a file:// folder's symlinks resolved: those of its
// nearest existing ancestor when the folder does not exist yet (it would
// be created through them).
func resolved(l Location) Location {
	if l.Scheme != "file" {
		return l
	}
	dir, rest := filepath.Clean(l.Dir), ""
	for {
		if p, err := filepath.EvalSymlinks(dir); err == nil {
			l.Dir = filepath.ToSlash(filepath.Join(p, rest))
			return l
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return l
		}
		rest = filepath.Join(filepath.Base(dir), rest)
		dir = parent
	}
}
