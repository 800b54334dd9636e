package gpu

import "fmt"

// KVRegion names the K or V of one layer for a token range of one block:
// the unit a reference engine reads or writes per layer.
type KVRegion struct {
	Block int
	Layer int
	KV    KV
	// Start and End are the tokens [Start, End) of the block; the
	// region's bytes are (End-Start) x Layout.TokenBytes, [token][head][dim].
	Start, End int
}

// geom is an arena's geometry and the arithmetic both backends share: it
// maps a block's host-form bytes to arena offsets. An arena of numBlocks
// blocks is nseg planes of numBlocks segments of segBytes each; segment s
// of block b is at (s*numBlocks+b)*segBytes, and holds bytes
// [s*segBytes, (s+1)*segBytes) of the block's host form. A block-contiguous
// arena is one plane (nseg 1, segBytes = blockBytes); a layer-separate one
// has a plane per (layer, K or V).
type geom struct {
	numBlocks  int
	blockBytes int
	nseg       int
	segBytes   int
	layout     Layout
	hasLayout  bool
}

// newGeom is the geometry of NewArena: opaque, block-contiguous blocks.
func newGeom(numBlocks, blockBytes int) (geom, int, error) {
	total, err := checkArenaSize(numBlocks, blockBytes)
	if err != nil {
		return geom{}, 0, err
	}
	return geom{numBlocks: numBlocks, blockBytes: blockBytes, nseg: 1, segBytes: blockBytes}, total, nil
}

// newKVGeom is the geometry of NewKVArena.
func newKVGeom(l Layout, numBlocks int) (geom, int, error) {
	if !l.kind.Valid() {
		return geom{}, 0, fmt.Errorf("%w: layout of kind %v (use NewLayout)", ErrInvalidSpec, l.kind)
	}
	g, total, err := newGeom(numBlocks, l.blockBytes)
	if err != nil {
		return geom{}, 0, err
	}
	g.layout, g.hasLayout = l, true
	if l.kind == LayerSeparate {
		g.nseg, g.segBytes = 2*l.spec.Layers, l.regionBytes
	}
	return g, total, nil
}

func (g *geom) NumBlocks() int  { return g.numBlocks }
func (g *geom) BlockBytes() int { return g.blockBytes }

// Layout returns the arena's KV layout, or false for an arena of opaque
// blocks from NewArena.
func (g *geom) Layout() (Layout, bool) { return g.layout, g.hasLayout }

// RegionOffset is Layout.ArenaOffset for this arena.
func (g *geom) RegionOffset(block, layer int, kv KV) (int, error) {
	if !g.hasLayout {
		return 0, errNoLayout
	}
	return g.layout.ArenaOffset(g.numBlocks, block, layer, kv)
}

var errNoLayout = fmt.Errorf("%w: arena of opaque blocks (from NewArena) has no KV layout; use NewKVArena", ErrShape)

// regionRange returns where r's bytes lie in its block's host form,
// checking that the region exists and that n is its size.
func (g *geom) regionRange(r KVRegion, n int) (off int, err error) {
	if !g.hasLayout {
		return 0, errNoLayout
	}
	l := g.layout
	if err := l.checkArena(g.numBlocks, r.Block, r.Layer, r.KV); err != nil {
		return 0, err
	}
	if r.Start < 0 || r.Start > r.End || r.End > l.blockTokens {
		return 0, fmt.Errorf("%w: tokens [%d,%d) of a %d-token block", ErrOutOfRange, r.Start, r.End, l.blockTokens)
	}
	if want := (r.End - r.Start) * l.tokenBytes; n != want {
		return 0, fmt.Errorf("%w: %d-byte buffer for tokens [%d,%d), want %d bytes", ErrShape, n, r.Start, r.End, want)
	}
	return l.segment(r.Layer, r.KV)*l.regionBytes + r.Start*l.tokenBytes, nil
}

// pieces calls f for each contiguous piece of bytes [off, off+n) of
// block's host form, with the piece's offset in the arena, its offset in
// the block and its length. The range must have been checked.
func (g *geom) pieces(block, off, n int, f func(arenaOff, blockOff, n int)) {
	for n > 0 {
		s, in := off/g.segBytes, off%g.segBytes
		k := min(n, g.segBytes-in)
		f((s*g.numBlocks+block)*g.segBytes+in, off, k)
		off += k
		n -= k
	}
}

// rawCopy copies between b and bytes [off, off+len(b)) of block's host
// form, a range already checked: an arena's write or read.
type rawCopy func(block, off int, b []byte) error

// inBlock runs copy over bytes [off, off+len(b)) of block once the range
// lies within the arena (ErrOutOfRange otherwise): an arena's WriteBlock
// and ReadBlock.
func (g *geom) inBlock(block, off int, b []byte, copy rawCopy) error {
	if err := checkRange(block, off, len(b), g.numBlocks, g.blockBytes); err != nil {
		return err
	}
	return copy(block, off, b)
}

// inRegion runs copy over region r's bytes once b fits it exactly
// (regionRange's errors otherwise): an arena's WriteRegion and ReadRegion.
func (g *geom) inRegion(r KVRegion, b []byte, copy rawCopy) error {
	off, err := g.regionRange(r, len(b))
	if err != nil {
		return err
	}
	return copy(r.Block, off, b)
}
