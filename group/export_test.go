package group

// Pending returns how many reductions l's owner keeps: begun by some rank
// and not yet forgotten. It is 0 once l is closed.
func (l *Local) Pending() int {
	rep := make(pendingMsg, 1)
	select {
	case l.in <- rep:
		return <-rep
	case <-l.done:
		return 0
	}
}
