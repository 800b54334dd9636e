package cachesim

// farthestHeap is an indexed binary max-heap of compact ids keyed by (next
// use, depth): the root is the id OPT evicts. pos[c] is c's slot, -1 when c is
// not resident. It never allocates after construction.
type farthestHeap struct {
	heap  []int32
	pos   []int32
	next  []int32
	depth []int32
}

func newFarthestHeap(n int) *farthestHeap {
	h := &farthestHeap{
		heap:  make([]int32, 0, n),
		pos:   make([]int32, n),
		next:  make([]int32, n),
		depth: make([]int32, n),
	}
	for c := range h.pos {
		h.pos[c] = -1
	}
	return h
}

func (h *farthestHeap) len() int { return len(h.heap) }

func (h *farthestHeap) contains(c int32) bool { return h.pos[c] >= 0 }

// set inserts c or updates its key.
func (h *farthestHeap) set(c, next, depth int32) {
	h.next[c], h.depth[c] = next, depth
	if h.pos[c] < 0 {
		h.pos[c] = int32(len(h.heap))
		h.heap = append(h.heap, c)
		h.up(int(h.pos[c]))
		return
	}
	i := int(h.pos[c])
	if !h.down(i) {
		h.up(i)
	}
}

// pop removes and returns the id with the farthest next use.
func (h *farthestHeap) pop() int32 {
	c := h.heap[0]
	last := len(h.heap) - 1
	h.swap(0, last)
	h.heap = h.heap[:last]
	h.pos[c] = -1
	if last > 0 {
		h.down(0)
	}
	return c
}

// above reports whether the id in slot i belongs above the one in slot j.
func (h *farthestHeap) above(i, j int) bool {
	a, b := h.heap[i], h.heap[j]
	if h.next[a] != h.next[b] {
		return h.next[a] > h.next[b]
	}
	return h.depth[a] > h.depth[b]
}

func (h *farthestHeap) swap(i, j int) {
	h.heap[i], h.heap[j] = h.heap[j], h.heap[i]
	h.pos[h.heap[i]] = int32(i)
	h.pos[h.heap[j]] = int32(j)
}

func (h *farthestHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.above(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

// down sifts slot i down and reports whether it moved.
func (h *farthestHeap) down(i int) bool {
	start := i
	for {
		l := 2*i + 1
		if l >= len(h.heap) {
			break
		}
		c := l
		if r := l + 1; r < len(h.heap) && h.above(r, l) {
			c = r
		}
		if !h.above(c, i) {
			break
		}
		h.swap(i, c)
		i = c
	}
	return i > start
}
