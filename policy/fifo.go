package policy

// fifo evicts keys in the order they became resident; hits do not reorder.
type fifo struct{ keyQueue }

func newFIFO(capacity int) *fifo { return &fifo{newKeyQueue(capacity)} }

func (p *fifo) Kind() Kind { return FIFO }

// Add appends k unless it is already resident (an access, which FIFO ignores).
func (p *fifo) Add(k Key) {
	if _, ok := p.index[k]; !ok {
		p.push(k)
	}
}

// Access does nothing: FIFO order is insertion order.
func (p *fifo) Access(Key) {}
