package gpu

import "sync"

// fifo runs items on one goroutine in the order they were pushed. It is
// the in-order core of a stream: the host backend's items are copy
// batches, the CUDA backend's are recorded events to wait on. The queue is
// unbounded: enqueueing a copy never blocks the caller.
type fifo[T any] struct {
	run func(T)

	mu      sync.Mutex
	items   []T
	spare   []T // the drained slice, reused to avoid allocations
	closed  bool
	last    *Event // event of the newest item, for Synchronize
	wake    chan struct{}
	stopped chan struct{}
}

// newFIFO starts the worker goroutine; close stops it.
func newFIFO[T any](run func(T)) *fifo[T] {
	q := &fifo[T]{
		run:     run,
		wake:    make(chan struct{}, 1),
		stopped: make(chan struct{}),
	}
	go q.loop()
	return q
}

// push appends item, whose completion ev reports, or fails with ErrClosed.
func (q *fifo[T]) push(item T, ev *Event) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return ErrClosed
	}
	q.items = append(q.items, item)
	q.last = ev
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default: // a wake-up is already pending
	}
	return nil
}

// lastEvent returns the event of the newest item pushed, or nil.
func (q *fifo[T]) lastEvent() *Event {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.last
}

// close refuses further pushes, waits until every pushed item has run and
// the worker has exited. It is idempotent.
func (q *fifo[T]) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	<-q.stopped
}

func (q *fifo[T]) loop() {
	defer close(q.stopped)
	for {
		q.mu.Lock()
		for len(q.items) == 0 {
			if q.closed {
				q.mu.Unlock()
				return
			}
			q.mu.Unlock()
			<-q.wake
			q.mu.Lock()
		}
		batch := q.items
		q.items, q.spare = q.spare[:0], nil
		q.mu.Unlock()

		var zero T
		for i := range batch {
			q.run(batch[i])
			batch[i] = zero // drop references to host memory early
		}

		q.mu.Lock()
		q.spare = batch[:0]
		q.mu.Unlock()
	}
}
