package policy

// lru evicts the least recently added or accessed key: its queue is ordered
// by recency, head coldest, and every hit moves the key to the back.
type lru struct{ keyQueue }

func newLRU(capacity int) *lru { return &lru{newKeyQueue(capacity)} }

func (p *lru) Kind() Kind { return LRU }

// Add makes k the most recently used key, inserting it if needed.
func (p *lru) Add(k Key) {
	if i, ok := p.index[k]; ok {
		p.q.moveToBack(&p.arena, i)
		return
	}
	p.push(k)
}

// Access makes a resident k the most recently used key.
func (p *lru) Access(k Key) {
	if i, ok := p.index[k]; ok {
		p.q.moveToBack(&p.arena, i)
	}
}
