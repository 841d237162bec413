package badgerstore

import (
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// Option configures Open.
type Option func(*config)

type config struct {
	db     *badger.DB
	path   string
	prefix []byte
	sync   bool
	badger func(badger.Options) badger.Options
	limit  int64 // largest value an in-memory database takes (WithValueLimit)
}

func defaultConfig() config {
	return config{prefix: []byte("tflo/state/"), sync: true}
}

func (c *config) validate() error {
	switch {
	case c.db == nil && c.path == "":
		return errors.New("badger state store: give either WithDB (an open database) or WithPath (a folder to open one in)")
	case c.db != nil && c.path != "":
		return errors.New("badger state store: WithDB and WithPath both given; a store uses one database")
	case c.db != nil && c.badger != nil:
		return errors.New("badger state store: WithBadgerOptions only applies to a database opened WithPath")
	case c.limit < 0:
		return fmt.Errorf("badger state store: value limit %d bytes must be positive (0 for the default)", c.limit)
	}
	return nil
}

// WithDB makes the store use an already open database, shared with other
// users (typically the keyed hot state). The store never closes it. There
// is no default: give WithDB or WithPath.
func WithDB(db *badger.DB) Option { return func(c *config) { c.db = db } }

// WithPath makes the store open (and, on Close, close) its own database in
// folder path. There is no default: give WithDB or WithPath.
func WithPath(path string) Option { return func(c *config) { c.path = path } }

// WithBadgerOptions adjusts the badger.Options a WithPath database is opened
// with (default: badger.DefaultOptions(path) with logging off).
func WithBadgerOptions(f func(badger.Options) badger.Options) Option {
	return func(c *config) { c.badger = f }
}

// WithPrefix sets the prefix of every key the store writes, so it can share
// a database. Snapshots live under prefix+"s/", cursors under prefix+"c/",
// epoch claims under prefix+"e/". Default: "tflo/state/".
func WithPrefix(prefix []byte) Option {
	return func(c *config) { c.prefix = append([]byte(nil), prefix...) }
}

// WithSync sets whether every write is followed by db.Sync (fsync of the
// value log), making a nil return mean durable. Default: true.
func WithSync(sync bool) Option { return func(c *config) { c.sync = sync } }

// WithValueLimit tells a store on an in-memory database (WithDB) the
// ValueThreshold the database was opened with: Badger refuses a larger
// value with an error that carries the whole value, and no longer
// reports the threshold after Open, so the store refuses it first, with
// a short error. Default (0): 1 MiB, the most an in-memory database
// takes (a WithPath store knows its own). Open refuses a negative n.
func WithValueLimit(n int64) Option { return func(c *config) { c.limit = n } }
