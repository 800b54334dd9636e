package refengine

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/kvtier/kvtier/gpu"
)

// pagedKV is the KVStore an integrator writes over kvtier's block arena,
// here with the arena as Go byte slices: a sequence's block table maps
// logical block pos/BlockTokens to a physical block, and inside the block
// (laid out [layer][kv][token][head][dim], float32 little-endian) the
// position is token slot pos%BlockTokens. Blocks are taken from free as
// the sequence grows.
type pagedKV struct {
	layout gpu.Layout
	view   gpu.TensorView // one block
	arena  [][]byte       // physical block -> BlockBytes bytes
	table  []int          // logical block -> physical block
	free   []int          // physical blocks not yet taken
}

func newPagedKV(t testing.TB, spec gpu.ModelSpec, blockTokens int, arena [][]byte, free []int) *pagedKV {
	t.Helper()
	layout, err := gpu.NewLayout(spec, blockTokens)
	if err != nil {
		t.Fatal(err)
	}
	return &pagedKV{layout: layout, view: layout.BlockView(), arena: arena, free: free}
}

// slot returns the bytes of K (which=0) or V (which=1) of one layer at one
// position, taking a new block if grow and the position is one block past
// the table's end.
func (p *pagedKV) slot(layer, pos, which int, grow bool) ([]byte, error) {
	bt := p.layout.BlockTokens()
	logical := pos / bt
	if grow && logical == len(p.table) && len(p.free) > 0 {
		p.table = append(p.table, p.free[0])
		p.free = p.free[1:]
	}
	if pos < 0 || logical >= len(p.table) {
		return nil, fmt.Errorf("%w: no block for position %d", ErrNotWritten, pos)
	}
	off, err := p.view.Address(layer, which, pos%bt, 0, 0)
	if err != nil {
		return nil, err
	}
	n := p.layout.Spec().KVHeads * p.layout.Spec().HeadDim * 4
	return p.arena[p.table[logical]][off : off+n], nil
}

func (p *pagedKV) ReadKV(layer, pos int, k, v []float32) error {
	for which, dst := range [][]float32{k, v} {
		b, err := p.slot(layer, pos, which, false /* grow */)
		if err != nil {
			return err
		}
		for i := range dst {
			dst[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
	}
	return nil
}

func (p *pagedKV) WriteKV(layer, pos int, k, v []float32) error {
	for which, src := range [][]float32{k, v} {
		b, err := p.slot(layer, pos, which, true /* grow */)
		if err != nil {
			return err
		}
		for i, x := range src {
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
		}
	}
	return nil
}

// newArena returns n zeroed blocks and a shuffled free list, so logical
// and physical block numbers differ.
func newArena(r *rand.Rand, n, blockBytes int) ([][]byte, []int) {
	arena := make([][]byte, n)
	for i := range arena {
		arena[i] = make([]byte, blockBytes)
	}
	return arena, r.Perm(n)
}

// TestPagedKVMatchesReference runs chunked forwards over the block-table
// mapping described in the package doc and shares full prefix blocks
// between two sequences, as kvtier's prefix cache does.
func TestPagedKVMatchesReference(t *testing.T) {
	m := mustModel(t, TinyConfig)
	r := rand.New(rand.NewPCG(10, 11))
	const blockTokens = 4
	layout, err := gpu.NewLayout(m.Spec(), blockTokens)
	if err != nil {
		t.Fatal(err)
	}
	arena, free := newArena(r, 16, layout.BlockBytes())

	a := randTokens(r, TinyConfig.Vocab, 10) // blocks 0 and 1 full, block 2 partial
	seqA := newPagedKV(t, m.Spec(), blockTokens, arena, free)
	start := 0
	for _, size := range []int{3, 1, 5, 1} {
		got, err := m.Forward(seqA, a[start:start+size], start)
		if err != nil {
			t.Fatal(err)
		}
		requireSameBits(t, fmt.Sprintf("seq A at %d", start), got, mustRef(t, m, a), start)
		start += size
	}

	// Sequence B hits A's two full blocks and computes its own tail into a
	// fresh block.
	shared := 2 * blockTokens
	seqB := newPagedKV(t, m.Spec(), blockTokens, arena, seqA.free)
	seqB.table = append([]int(nil), seqA.table[:2]...)
	b := append(append([]int64(nil), a[:shared]...), randTokens(r, TinyConfig.Vocab, 5)...)
	got, err := m.Forward(seqB, b[shared:], shared)
	if err != nil {
		t.Fatal(err)
	}
	requireSameBits(t, "seq B on shared blocks", got, mustRef(t, m, b), shared)
	if seqB.table[2] == seqA.table[2] {
		t.Fatalf("sequences share their partial block %d", seqA.table[2])
	}
}
