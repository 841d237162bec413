package files

import "fmt"

// Option configures Open.
type Option func(*config)

type config struct {
	workers int
	sync    bool
	perm    uint32
}

func defaultConfig() config {
	return config{workers: 8, sync: true, perm: 0o600}
}

func (c *config) validate() error {
	if c.workers < 1 || c.workers > 1024 {
		return fmt.Errorf("files state store: %d I/O workers; give between 1 and 1024", c.workers)
	}
	if c.perm&0o600 != 0o600 {
		return fmt.Errorf("files state store: file mode %#o does not let the owner read and write", c.perm)
	}
	return nil
}

// WithIOWorkers sets how many goroutines perform file I/O; it bounds how
// many files a SaveBatch writes and fsyncs at once. Default: 8.
func WithIOWorkers(n int) Option { return func(c *config) { c.workers = n } }

// WithSync sets whether writes fsync the file and the folder. Without it a
// crash can lose or truncate recent writes: use false for tests only.
// Default: true.
func WithSync(sync bool) Option { return func(c *config) { c.sync = sync } }

// WithFileMode sets the permission bits of snapshot and cursor files.
// Default: 0600.
func WithFileMode(perm uint32) Option { return func(c *config) { c.perm = perm } }
