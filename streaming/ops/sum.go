package ops

import "math"

// ksum is a running sum with Neumaier compensation: adding and removing
// values for ever (a sliding window) keeps the error of a single addition
// instead of accumulating one rounding error per event.
type ksum struct {
	sum, comp float64
}

func (s *ksum) add(x float64) {
	t := s.sum + x
	if math.Abs(s.sum) >= math.Abs(x) {
		s.comp += (s.sum - t) + x
	} else {
		s.comp += (x - t) + s.sum
	}
	s.sum = t
}

func (s *ksum) value() float64 { return s.sum + s.comp }
