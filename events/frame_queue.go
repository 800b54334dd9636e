package events

import "sync"

// frameQueueStart is the ring a subscriber's queue starts with, in batches:
// most subscribers keep up, and their queue never holds more than a few.
const frameQueueStart = 16

// frameQueue is one subscriber's queue of batches: a FIFO of at most max
// frames whose ring starts at frameQueueStart and doubles as it fills, up
// to max, so a subscriber that joins costs a few hundred bytes rather than
// max frames (32 bytes each) at once. Server.send pushes and closes it; the
// connection's writer pops. It never shrinks: a queue that once filled
// keeps its ring until its connection ends.
type frameQueue struct {
	mu     sync.Mutex
	ring   []Frame // len(ring) is the capacity now
	head   int     // the oldest frame's index in ring
	n      int     // frames queued
	max    int
	closed bool
	// ready holds a token when a frame was pushed or the queue closed
	// since the writer last looked.
	ready chan struct{}
}

func newFrameQueue(max int) *frameQueue {
	return &frameQueue{ring: make([]Frame, min(max, frameQueueStart)), max: max, ready: make(chan struct{}, 1)}
}

// push queues f and reports true, or reports false, queueing nothing, when
// max frames are queued (the batch is dropped for this subscriber). push
// after close panics.
func (q *frameQueue) push(f Frame) bool {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		panic("kvtier: events: push to a closed subscriber queue")
	}
	if q.n == q.max {
		q.mu.Unlock()
		return false
	}
	if q.n == len(q.ring) {
		q.grow()
	}
	q.ring[(q.head+q.n)%len(q.ring)] = f
	q.n++
	q.mu.Unlock()
	q.wake()
	return true
}

// grow doubles the ring, up to max, keeping the frames' order; q.mu held.
func (q *frameQueue) grow() {
	ring := make([]Frame, min(2*len(q.ring), q.max))
	k := copy(ring, q.ring[q.head:])
	copy(ring[k:], q.ring[:q.head])
	q.ring, q.head = ring, 0
}

// pop returns the oldest frame (ok); with none queued, ok is false and
// closed says whether close was called (no frame will come).
func (q *frameQueue) pop() (f Frame, ok, closed bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == 0 {
		return Frame{}, false, q.closed
	}
	f = q.ring[q.head]
	q.ring[q.head] = Frame{} // the writer owns the payload now
	q.head = (q.head + 1) % len(q.ring)
	q.n--
	return f, true, false
}

// close marks the queue ended: pop returns what is queued, then closed.
// Calling it twice is harmless.
func (q *frameQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	q.wake()
}

func (q *frameQueue) wake() {
	select {
	case q.ready <- struct{}{}:
	default: // a token is already there
	}
}

// len returns the frames queued and the ring's capacity now.
func (q *frameQueue) len() (n, capacity int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n, len(q.ring)
}
