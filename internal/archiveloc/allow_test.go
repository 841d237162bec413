package archiveloc

import (
	"os"
	"path/filepath"
	"testing"
)

// TestAllowed: the backfill activity opened any file:// path (creating
// it) and any bucket; an allowlist of roots bounds it, and a path that
// climbs out of a root with ".." or only shares its name's prefix is
// outside it.
func TestAllowed(t *testing.T) {
	roots, err := ParseRoots("backfill.archive_roots", []string{"file:///var/tflo/archive", "s3://tflo/prod"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		loc string
		ok  bool
	}{
		{"file:///var/tflo/archive", true},
		{"file:///var/tflo/archive/", true},
		{"file:///var/tflo/archive/2026", true},
		{"file:///var/tflo/archive/a/../b", true},
		{"file:///var/tflo/archive/../../../etc", false},
		{"file:///var/tflo/archive2", false},
		{"file:///etc", false},
		{"s3://tflo/prod", true},
		{"s3://tflo/prod/iot", true},
		{"s3://tflo/production", false},
		{"s3://tflo", false},
		{"s3://other/prod", false},
	} {
		loc, err := Parse(tc.loc)
		if err != nil {
			t.Fatalf("%s: %v", tc.loc, err)
		}
		err = Allowed(loc, roots, "backfill.archive_roots")
		switch {
		case tc.ok && err != nil:
			t.Errorf("%s refused: %v", tc.loc, err)
		case !tc.ok && err == nil:
			t.Errorf("%s allowed", tc.loc)
		case !tc.ok:
			want := "archive location " + loc.String() + " is not allowed: it is under none of backfill.archive_roots [file:///var/tflo/archive, s3://tflo/prod]"
			if err.Error() != want {
				t.Errorf("%s: error %q, want %q", tc.loc, err, want)
			}
		}
	}
	loc, _ := Parse("file:///var/tflo/archive")
	if err := Allowed(loc, nil, "backfill.archive_roots"); err == nil || err.Error() != "archive location file:///var/tflo/archive is not allowed: backfill.archive_roots is empty, so no archive is" {
		t.Errorf("empty allowlist: %v", err)
	}
	if _, err := ParseRoots("backfill.archive_roots", []string{"/var/tflo"}); err == nil {
		t.Error("a root without a scheme is refused")
	}
}

// TestAllowedResolvesSymlinks: a file:// location was judged by its path
// as written, so a symlink inside an allowed folder pointing out of it
// let a backfill read any folder. Real paths are compared; a root that is
// itself a link still allows what is inside it.
func TestAllowedResolvesSymlinks(t *testing.T) {
	base := t.TempDir()
	allowed, outside := filepath.Join(base, "archive"), filepath.Join(base, "secret")
	for _, d := range []string{filepath.Join(allowed, "iot"), outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(outside, filepath.Join(allowed, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(allowed, filepath.Join(base, "archive-link")); err != nil {
		t.Fatal(err)
	}
	check := func(root, loc string, ok bool) {
		t.Helper()
		roots, err := ParseRoots("backfill.archive_roots", []string{"file://" + root})
		if err != nil {
			t.Fatal(err)
		}
		l, err := Parse("file://" + loc)
		if err != nil {
			t.Fatal(err)
		}
		err = Allowed(l, roots, "backfill.archive_roots")
		if ok && err != nil {
			t.Errorf("%s under %s refused: %v", loc, root, err)
		}
		if !ok && err == nil {
			t.Errorf("%s under %s allowed", loc, root)
		}
	}
	check(allowed, filepath.Join(allowed, "iot"), true)
	check(allowed, filepath.Join(allowed, "escape"), false)
	check(allowed, filepath.Join(allowed, "escape", "x"), false) // would be created through the link
	check(allowed, filepath.Join(allowed, "new", "x"), true)
	check(filepath.Join(base, "archive-link"), filepath.Join(base, "archive-link", "iot"), true)
	check(filepath.Join(base, "archive-link"), filepath.Join(base, "archive-link", "escape"), false)
}
