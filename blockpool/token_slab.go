package blockpool

// tokenSlab stores the blocks' token ids in large chunks, each holding the tokens
// of a run of consecutive block ids: block id's tokens are chunk id>>shift at
// offset (id&mask)*BlockSize. A chunk is allocated when the first block of its
// run is filled, so a pool costs no token memory until it caches blocks, and a
// full pool's tokens sit in a few large arrays, in block id order, rather than
// one small allocation per block scattered over the heap.
type tokenSlab struct {
	chunks    [][]int64
	shift     uint // log2 of blocks per chunk
	blockSize int
	numBlocks int
}

// slabChunkBytes is the target size of one chunk.
const slabChunkBytes = 1 << 20

func (s *tokenSlab) init(numBlocks, blockSize int) {
	s.blockSize, s.numBlocks = blockSize, numBlocks
	s.shift = 0
	for blockSize <= slabChunkBytes/8>>(s.shift+1) && 1<<(s.shift+1) <= numBlocks {
		s.shift++
	}
	s.chunks = make([][]int64, (numBlocks+1<<s.shift-1)>>s.shift)
}

// block returns the empty slice, with capacity BlockSize, that holds block id's
// tokens. Appending up to BlockSize tokens writes into the slab.
func (s *tokenSlab) block(id BlockID) []int64 {
	c := int(id) >> s.shift
	if s.chunks[c] == nil {
		n := min(1<<s.shift, s.numBlocks-c<<s.shift)
		s.chunks[c] = make([]int64, n*s.blockSize)
	}
	off := (int(id) & (1<<s.shift - 1)) * s.blockSize
	return s.chunks[c][off : off : off+s.blockSize]
}

// holds reports whether t is block id's place in the slab (t may be shorter than
// BlockSize; its capacity must be exactly that place).
func (s *tokenSlab) holds(id BlockID, t []int64) bool {
	c := int(id) >> s.shift
	if c >= len(s.chunks) || s.chunks[c] == nil || cap(t) != s.blockSize {
		return false
	}
	off := (int(id) & (1<<s.shift - 1)) * s.blockSize
	return &t[:1][0] == &s.chunks[c][off]
}
