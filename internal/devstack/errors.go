package devstack

import "errors"

// ErrNoBinary is returned when a server binary is not built; the message
// names where it was looked for and that `make tools` builds it.
var ErrNoBinary = errors.New("server binary not found")
