package parquet_test

import (
	"os"
	"strings"
	"testing"

	"github.com/tflo-io/tflo/connectors/parquet"
)

// capabilities lists the optional Archive interfaces a implements, in
// the order the package documentation names them.
func capabilities(a parquet.Archive) (has, lacks []string) {
	for _, c := range []struct {
		name string
		ok   bool
	}{
		{"Uploader", is[parquet.Uploader](a)},
		{"Mover", is[parquet.Mover](a)},
		{"Deleter", is[parquet.Deleter](a)},
		{"PageLister", is[parquet.PageLister](a)},
		{"UploadLister", is[parquet.UploadLister](a)},
	} {
		if c.ok {
			has = append(has, c.name)
		} else {
			lacks = append(lacks, c.name)
		}
	}
	return has, lacks
}

func is[T any](a parquet.Archive) bool { _, ok := a.(T); return ok }

// The package documentation says which optional capabilities each archive
// has; a reader choosing an archive (or writing one) goes by it. Bug: it
// said LocalArchive had "the first three" (Uploader, Mover, Deleter) after
// LocalArchive became a PageLister too.
func TestArchiveCapabilitiesAsDocumented(t *testing.T) {
	b, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Join(strings.Fields(strings.ReplaceAll(string(b), "//", " ")), " ")
	local, err := parquet.NewLocalArchive(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if has, lacks := capabilities(parquet.NewMemArchive()); len(lacks) != 0 {
		t.Fatalf("MemArchive has %v and lacks %v; the documentation says it has all five", has, lacks)
	}
	has, lacks := capabilities(local)
	if len(lacks) != 1 {
		t.Fatalf("LocalArchive has %v and lacks %v: update the documentation and this test", has, lacks)
	}
	want := "connectors/s3 and [MemArchive] have all five, [LocalArchive] all but [" + lacks[0] + "]"
	if !strings.Contains(doc, want) {
		t.Fatalf("doc.go does not say %q (LocalArchive has %v and lacks %v)", want, has, lacks)
	}
}
