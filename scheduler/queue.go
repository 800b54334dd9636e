package scheduler

// queue is a double-ended FIFO of sequences on a ring buffer: the waiting
// queue. Arrivals go to the back, preempted sequences to the front.
type queue struct {
	buf  []*sequence
	head int
	n    int
}

func (q *queue) len() int { return q.n }

// at returns the i-th sequence from the front; 0 <= i < len.
func (q *queue) at(i int) *sequence {
	if i < 0 || i >= q.n {
		panic("kvtier: scheduler: queue index out of range")
	}
	return q.buf[(q.head+i)%len(q.buf)]
}

func (q *queue) grow() {
	if q.n < len(q.buf) {
		return
	}
	nb := make([]*sequence, max(8, 2*len(q.buf)))
	for i := range q.n {
		nb[i] = q.at(i)
	}
	q.buf, q.head = nb, 0
}

func (q *queue) pushBack(s *sequence) {
	q.grow()
	q.buf[(q.head+q.n)%len(q.buf)] = s
	q.n++
}

func (q *queue) pushFront(s *sequence) {
	q.grow()
	q.head = (q.head - 1 + len(q.buf)) % len(q.buf)
	q.buf[q.head] = s
	q.n++
}

func (q *queue) popFront() *sequence {
	if q.n == 0 {
		panic("kvtier: scheduler: pop from an empty queue")
	}
	s := q.buf[q.head]
	q.buf[q.head] = nil
	q.head = (q.head + 1) % len(q.buf)
	q.n--
	return s
}
