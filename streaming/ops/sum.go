package ops

import "github.com/tflo-io/tflo/streaming/internal/opstate"

// ksum is the compensated running sum (opstate.KSum).
type ksum = opstate.KSum
