package blockpool

// none marks the end of the free queue.
const none = -1

// freeQueue is an intrusive doubly linked list over the pool's blocks: O(1) push at
// either end, pop at the head and removal from the middle, with no allocation.
type freeQueue struct {
	head, tail int32
	n          int
}

func (q *freeQueue) init() { q.head, q.tail, q.n = none, none, 0 }

func (q *freeQueue) pushTail(blocks []block, id int32) {
	b := &blocks[id]
	b.prev, b.next = q.tail, none
	if q.tail == none {
		q.head = id
	} else {
		blocks[q.tail].next = id
	}
	q.tail = id
	q.n++
}

func (q *freeQueue) pushHead(blocks []block, id int32) {
	b := &blocks[id]
	b.prev, b.next = none, q.head
	if q.head == none {
		q.tail = id
	} else {
		blocks[q.head].prev = id
	}
	q.head = id
	q.n++
}

func (q *freeQueue) remove(blocks []block, id int32) {
	b := &blocks[id]
	if b.prev == none {
		q.head = b.next
	} else {
		blocks[b.prev].next = b.next
	}
	if b.next == none {
		q.tail = b.prev
	} else {
		blocks[b.next].prev = b.prev
	}
	b.prev, b.next = none, none
	q.n--
}
