package archiveloc

import (
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
