package policy

// keyQueue is one indexed queue of resident keys, the shared core of LRU and
// FIFO, which differ only in whether a hit moves a key to the back.
type keyQueue struct {
	arena
	q     queue
	index map[Key]int32
}

func newKeyQueue(capacity int) keyQueue {
	return keyQueue{arena: newArena(capacity), q: newQueue(), index: make(map[Key]int32, hint(capacity))}
}

// push appends k as the newest key; k must not be resident.
func (p *keyQueue) push(k Key) {
	i := p.alloc(k)
	p.q.pushBack(&p.arena, i)
	p.index[k] = i
}

// Remove forgets k; a no-op if k is not resident.
func (p *keyQueue) Remove(k Key) {
	if i, ok := p.index[k]; ok {
		p.drop(i)
	}
}

// Evict walks from the head (oldest) and takes the first evictable key.
func (p *keyQueue) Evict(evictable func(Key) bool) (Key, bool) {
	for i := p.q.head; i != nilNode; i = p.nodes[i].next {
		k := p.nodes[i].key
		if evictable == nil || evictable(k) {
			p.drop(i)
			return k, true
		}
	}
	return 0, false
}

// Contains reports whether k is resident.
func (p *keyQueue) Contains(k Key) bool {
	_, ok := p.index[k]
	return ok
}

// Len returns the number of resident keys.
func (p *keyQueue) Len() int { return p.q.n }

func (p *keyQueue) drop(i int32) {
	delete(p.index, p.nodes[i].key)
	p.q.unlink(&p.arena, i)
	p.release(i)
}
