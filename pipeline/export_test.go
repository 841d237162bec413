package pipeline

import "time"

// Registered reports whether w holds its presence lease in its
// coordination store.
func Registered(w *Worker) bool {
	m := w.member.Load()
	return m != nil && m.sw.Err() == nil
}

// LastRenewal is when w's presence lease was last renewed.
func LastRenewal(w *Worker) time.Time { return w.member.Load().sw.LastRenewal() }
