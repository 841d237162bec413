package envconfig

import "errors"

// ErrUnsupported is returned when a config field's type has no text form
// (maps, nested slices, channels); the message names the field.
var ErrUnsupported = errors.New("envconfig: unsupported field type")
