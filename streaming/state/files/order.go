package files

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// writeOrder keeps the writes of each snapshot file in call order. A
// write whose call gave up at its ctx's end may still land later (its
// rename waits behind a stalled fsync), and must not replace what a
// later call put in place: a checkpoint manifest, rewritten by every
// checkpoint, would go back to an older one, naming pieces a newer
// checkpoint's merge has deleted. So each write takes a ticket when it is
// called, and its rename happens only if no write with a later ticket
// has put its file in place; a superseded write drops its temporary file.
type writeOrder struct {
	mu      sync.Mutex
	seq     uint64                 // the last ticket given
	files   map[string]*fileWrites // files with writes not yet ended
	seed    maphash.Seed
	stripes [64]sync.Mutex // a file's check and rename run under its stripe
}

// fileWrites is the state of one file's writes in flight.
type fileWrites struct {
	placed uint64 // ticket of the last write put in place since tracking began
	open   int    // writes begun and not ended
}

func newWriteOrder() writeOrder {
	return writeOrder{files: map[string]*fileWrites{}, seed: maphash.MakeSeed()}
}

// begin gives a write of file name its ticket, in call order. The write
// must end once: fileWrite.end after a claim, or fileWrite.abandon.
func (o *writeOrder) begin(name string) *fileWrite {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.seq++
	f := o.files[name]
	if f == nil {
		f = &fileWrites{}
		o.files[name] = f
	}
	f.open++
	return &fileWrite{o: o, name: name, ticket: o.seq}
}

// place runs rename, the write of ticket putting its file in place as
// name, unless a later write has already; it reports whether it ran.
func (o *writeOrder) place(name string, ticket uint64, rename func() error) (bool, error) {
	st := &o.stripes[maphash.String(o.seed, name)%uint64(len(o.stripes))]
	st.Lock()
	defer st.Unlock()
	o.mu.Lock()
	f := o.files[name] // not nil: this write has not ended
	superseded := f.placed > ticket
	o.mu.Unlock()
	if superseded {
		return false, nil
	}
	if err := rename(); err != nil {
		return false, err
	}
	o.mu.Lock()
	f.placed = ticket
	o.mu.Unlock()
	return true, nil
}

func (o *writeOrder) end(name string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f := o.files[name]
	if f.open--; f.open == 0 {
		delete(o.files, name)
	}
}

// fileWrite is one write's ticket. The job doing the write claims it
// before starting; a caller that gives up abandons it, which ends it
// unless the job claimed it first (the job then ends it).
type fileWrite struct {
	o      *writeOrder
	name   string
	ticket uint64
	state  atomic.Int32 // writeNew, writeClaimed, writeEnded
}

const (
	writeNew = iota
	writeClaimed
	writeEnded
)

// claim reports whether the job may do the write (not abandoned).
func (w *fileWrite) claim() bool { return w.state.CompareAndSwap(writeNew, writeClaimed) }

// end ends a claimed write.
func (w *fileWrite) end() {
	w.state.Store(writeEnded)
	w.o.end(w.name)
}

// abandon ends the write if no job claimed it: it will never run.
func (w *fileWrite) abandon() {
	if w.state.CompareAndSwap(writeNew, writeEnded) {
		w.o.end(w.name)
	}
}
