//go:build linux

package keyedstate

import "testing"

func TestParseMapping(t *testing.T) {
	for _, tc := range []struct {
		line, path string
		m          mapRange
		ok         bool
	}{
		{"7f0a1c000000-7f0a1c200000 r--s 00000000 fd:01 1234                       /var/lib/tflo/state/000012.sst\n",
			"/var/lib/tflo/state/000012.sst", mapRange{0x7f0a1c000000, 0x7f0a1c200000, 1234}, true},
		{"7f0a1c000000-7f0a1c200000 rw-s 00000000 fd:01 99 /data/my state/000001.vlog",
			"/data/my state/000001.vlog", mapRange{0x7f0a1c000000, 0x7f0a1c200000, 99}, true},
		{"7f0a1c000000-7f0a1c200000 r--s 00000000 fd:01 99 /s/000003.sst (deleted)",
			"/s/000003.sst (deleted)", mapRange{0x7f0a1c000000, 0x7f0a1c200000, 99}, true},
		{"c000000000-c004000000 rw-p 00000000 00:00 0 \n", "", mapRange{}, false},                           // anonymous
		{"7ffd1000-7ffd3000 rw-p 00000000 00:00 0                          [stack]", "", mapRange{}, false}, // no file
		{"zz-7f0a1c200000 r--s 00000000 fd:01 1 /s/1.sst", "", mapRange{}, false},
		{"7f0a1c200000-7f0a1c000000 r--s 00000000 fd:01 1 /s/1.sst", "", mapRange{}, false}, // end before start
		{"7f0a1c000000-7f0a1c200000 r--s", "", mapRange{}, false},
		{"", "", mapRange{}, false},
	} {
		m, path, ok := parseMapping([]byte(tc.line))
		if ok != tc.ok || path != tc.path || (ok && m != tc.m) {
			t.Errorf("parseMapping(%q) = %+v, %q, %v; want %+v, %q, %v", tc.line, m, path, ok, tc.m, tc.path, tc.ok)
		}
	}
	a := startAdvisor("/var/lib/../lib/tflo/state")
	a.close()
	for path, want := range map[string]bool{
		"/var/lib/tflo/state/000012.sst":           true,
		"/var/lib/tflo/state/000001.vlog":          true,
		"/var/lib/tflo/state/MANIFEST":             false,
		"/var/lib/tflo/state/000003.sst (deleted)": false,
		"/var/lib/tflo/other/000012.sst":           false,
		"/var/lib/tflo/state/sub/000012.sst":       false,
	} {
		if got := a.owns(path); got != want {
			t.Errorf("owns(%q) = %v, want %v", path, got, want)
		}
	}
}
