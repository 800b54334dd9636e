package gpu

import "context"

// Event marks the completion of one copy batch. It is done once Done is
// closed; Err then holds the batch's result.
type Event struct {
	done chan struct{}
	err  error // written once, before done is closed
}

func newEvent() *Event { return &Event{done: make(chan struct{})} }

// complete records the result and wakes waiters. Called exactly once.
func (e *Event) complete(err error) {
	e.err = err
	close(e.done)
}

// Done returns a channel closed when the batch has completed.
func (e *Event) Done() <-chan struct{} { return e.done }

// Err returns the batch's result once Done is closed: nil if every copy
// was made. Before that it returns ErrNotDone.
func (e *Event) Err() error {
	select {
	case <-e.done:
		return e.err
	default:
		return ErrNotDone
	}
}

// Wait blocks until the batch completes and returns its result, or returns
// ctx.Err() if ctx ends first.
func (e *Event) Wait(ctx context.Context) error {
	select {
	case <-e.done:
		return e.err
	case <-ctx.Done():
		return ctx.Err()
	}
}
