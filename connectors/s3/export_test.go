package s3

// CraftedSegment and CraftedLoc describe a manifest a test writes behind
// the store's back, playing a bucket someone else can write to.
type CraftedSegment struct {
	Name       string
	Size, Data uint64
}

type CraftedLoc struct {
	Seg    string
	Off, N uint64
}

// CraftManifest encodes a manifest with a valid checksum but whatever
// fields the test chooses, unchecked.
func CraftManifest(gen uint64, segs []CraftedSegment, index map[string]CraftedLoc) []byte {
	m := &manifest{gen: gen, segs: map[string]*segment{}, index: map[string]loc{}}
	for _, s := range segs {
		m.segs[s.Name] = &segment{name: s.Name, size: s.Size, data: s.Data}
	}
	for k, l := range index {
		m.index[k] = loc{seg: l.Seg, off: l.Off, n: l.N}
	}
	return encodeManifest(m)
}

// SetCopyLimits lowers, until t ends, the largest source Move copies
// with one CopyObject and the size of the parts it copies a larger one
// in, so a test copies a small object in several parts.
func SetCopyLimits(t interface{ Cleanup(func()) }, maxCopyObject, partSize int64) {
	oldMax, oldPart := maxCopyObjectSize, copyPartSize
	maxCopyObjectSize, copyPartSize = maxCopyObject, partSize
	t.Cleanup(func() { maxCopyObjectSize, copyPartSize = oldMax, oldPart })
}
