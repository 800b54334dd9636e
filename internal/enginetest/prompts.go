package enginetest

import (
	"math/rand/v2"
	"sync"
)

// Prompts draws prompts over a few shared stems: each is a stem and a
// random tail of 0 to 2 blocks and a bit, so that requests share prefixes of
// several lengths and some end on a block boundary. It is safe for
// concurrent use; the sequence it draws is fixed by its seed when one
// goroutine draws.
type Prompts struct {
	mu    sync.Mutex
	rng   *rand.Rand
	vocab int
	bt    int
	// Stems are the shared prefixes; stem i is 2+i blocks long.
	Stems [][]int64
}

// NewPrompts returns a generator of prompts over stems stems, for a
// vocabulary of vocab tokens and blocks of bt tokens.
func NewPrompts(seed uint64, vocab, bt, stems int) *Prompts {
	p := &Prompts{rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), vocab: vocab, bt: bt}
	p.Stems = make([][]int64, stems)
	for i := range p.Stems {
		p.Stems[i] = p.tokens((2 + i) * bt)
	}
	return p
}

func (p *Prompts) tokens(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = p.rng.Int64N(int64(p.vocab))
	}
	return out
}

// Next returns a random stem and tail.
func (p *Prompts) Next() []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := append([]int64(nil), p.Stems[p.rng.IntN(len(p.Stems))]...)
	return append(out, p.tokens(p.rng.IntN(2*p.bt+2))...)
}

// Unique returns n random tokens that share no stem: a prompt only its
// caller knows (up to chance).
func (p *Prompts) Unique(n int) []int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tokens(n)
}

// IntN draws from the generator's source, for callers that want their
// random choices fixed by the same seed.
func (p *Prompts) IntN(n int) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rng.IntN(n)
}
