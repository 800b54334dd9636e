package policy

// nilNode marks the end of a queue or of the free list.
const nilNode int32 = -1

// node is one entry of an intrusive doubly-linked queue. Nodes live in an
// arena slice and link by index, so queues need no pointers and freed nodes
// are reused without allocation.
type node struct {
	key        Key
	prev, next int32
	freq       uint8 // S3-FIFO access counter, 0..maxFreq
	queue      uint8 // S3-FIFO queue the node is on
}

// arena holds the nodes of every queue of one policy and a free list of
// unused nodes (linked through next).
type arena struct {
	nodes []node
	free  int32
}

func newArena(capacity int) arena {
	return arena{nodes: make([]node, 0, hint(capacity)), free: nilNode}
}

// alloc returns a node for k with freq 0, unlinked.
func (a *arena) alloc(k Key) int32 {
	i := a.free
	if i == nilNode {
		i = int32(len(a.nodes))
		a.nodes = append(a.nodes, node{})
	} else {
		a.free = a.nodes[i].next
	}
	a.nodes[i] = node{key: k, prev: nilNode, next: nilNode}
	return i
}

// release puts an unlinked node back on the free list.
func (a *arena) release(i int32) {
	a.nodes[i] = node{prev: nilNode, next: a.free}
	a.free = i
}

// queue is a FIFO of arena nodes: head is the oldest, tail the newest.
type queue struct {
	head, tail int32
	n          int
}

func newQueue() queue { return queue{head: nilNode, tail: nilNode} }

// pushBack appends node i (unlinked) as the newest entry.
func (q *queue) pushBack(a *arena, i int32) {
	n := &a.nodes[i]
	n.prev, n.next = q.tail, nilNode
	if q.tail == nilNode {
		q.head = i
	} else {
		a.nodes[q.tail].next = i
	}
	q.tail = i
	q.n++
}

// unlink takes node i off the queue; the node stays allocated.
func (q *queue) unlink(a *arena, i int32) {
	n := &a.nodes[i]
	if n.prev == nilNode {
		q.head = n.next
	} else {
		a.nodes[n.prev].next = n.next
	}
	if n.next == nilNode {
		q.tail = n.prev
	} else {
		a.nodes[n.next].prev = n.prev
	}
	n.prev, n.next = nilNode, nilNode
	q.n--
}

// moveToBack makes node i, already on q, the newest entry.
func (q *queue) moveToBack(a *arena, i int32) {
	if q.tail == i {
		return
	}
	q.unlink(a, i)
	q.pushBack(a, i)
}
