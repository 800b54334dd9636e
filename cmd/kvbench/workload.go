package main

import "math/rand/v2"

// The alloc suite's sequences: seqBlocks full blocks of blockTokens tokens (or
// longBlockTokens in its realistic-block case), the first stemBlocks of them
// one of numStems shared stems (system prompts, few-shot headers) and the rest
// a private tail that no earlier sequence holds.
const (
	seqBlocks       = 32
	blockTokens     = 16
	longBlockTokens = 512
	stemBlocks      = 4
	numStems        = 16
)

// workload hands out prompts. Each comes from a small ring of token buffers; the
// first token of the private tail is a fresh value per prompt, so with chained
// block hashes the whole tail is new while the stem hits. Making a prompt costs
// one store, so the benchmark times the pool, not the generator.
//
// A prompt stays valid for the next len(bufs)-1 calls; pools copy the tokens
// they keep, so callers need it only for the duration of Allocate.
type workload struct {
	bt     int // tokens per block
	bufs   [][]int64
	next   int
	unique int64 // next tail marker
}

// newWorkload returns a workload of bt-token blocks whose tail markers start
// at base<<40, so workloads with distinct bases never produce the same tail.
func newWorkload(base int64, ring, bt int) *workload {
	rng := rand.New(rand.NewPCG(1, 2)) // equal stems in every workload: they are shared
	stems := make([][]int64, numStems)
	for i := range stems {
		stems[i] = make([]int64, stemBlocks*bt)
		for j := range stems[i] {
			stems[i][j] = rng.Int64N(1 << 17)
		}
	}
	w := &workload{bt: bt, bufs: make([][]int64, ring), unique: base<<40 + 1<<32}
	for i := range w.bufs {
		b := make([]int64, seqBlocks*bt)
		copy(b, stems[i%numStems])
		for j := len(stems[0]); j < len(b); j++ {
			b[j] = rng.Int64N(1 << 17)
		}
		w.bufs[i] = b
	}
	return w
}

// prompt returns the next prompt: buffer i of the ring carries stem i%numStems,
// and the tail is one no earlier prompt of this workload had.
func (w *workload) prompt() []int64 {
	b := w.bufs[w.next]
	w.next++
	if w.next == len(w.bufs) {
		w.next = 0
	}
	b[stemBlocks*w.bt] = w.unique
	w.unique++
	return b
}
