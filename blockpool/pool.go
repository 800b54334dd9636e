package blockpool

import (
	"fmt"
	"slices"

	"github.com/kvtier/kvtier/prefixhash"
)

// BlockID names a block of the pool: 0 <= id < NumBlocks.
type BlockID int32

// SeqID names a sequence (and a reservation's request).
type SeqID uint64

// Config sizes a Pool.
type Config struct {
	NumBlocks int // blocks in the pool, >= 1
	BlockSize int // tokens per block, >= 1
	VocabSize int // when > 0, every token id must be in [0, VocabSize)
}

func (c Config) validate() error {
	switch {
	case c.NumBlocks <= 0:
		return fmt.Errorf("%w: NumBlocks %d must be >= 1", ErrBadConfig, c.NumBlocks)
	case c.NumBlocks > 1<<31-1:
		return fmt.Errorf("%w: NumBlocks %d exceeds %d", ErrBadConfig, c.NumBlocks, 1<<31-1)
	case c.BlockSize <= 0:
		return fmt.Errorf("%w: BlockSize %d must be >= 1", ErrBadConfig, c.BlockSize)
	case c.VocabSize < 0:
		return fmt.Errorf("%w: VocabSize %d must be >= 0", ErrBadConfig, c.VocabSize)
	}
	return nil
}

type blockState uint8

const (
	stateFree blockState = iota
	stateUsed
	stateReserved
)

// block is one block's metadata: 48 bytes. Its token ids live in the pool's slab.
type block struct {
	tokens     []int64 // a full block's tokens, kept to confirm hits: its place in p.slab
	hash       prefixhash.Hash
	ref        int32
	prev, next int32 // free queue links
	state      blockState
	cached     bool // byHash maps hash to this block
}

type sequence struct {
	table     []BlockID
	numTokens int
	tail      []int64         // tokens of the last block while it is partial
	last      prefixhash.Hash // hash before the next block to fill
	hasLast   bool
}

// Evicted is a cached block whose contents were dropped because the block was
// reused. Hash is what it held.
type Evicted struct {
	Block BlockID
	Hash  prefixhash.Hash
}

// Allocation is the result of Allocate. Blocks belongs to the caller.
type Allocation struct {
	Blocks       []BlockID // the sequence's block table
	CachedTokens int       // leading tokens served from cached blocks
	HitBlocks    int       // leading blocks that were hits
}

// Stats counts the pool's state and history.
type Stats struct {
	NumBlocks   int
	BlockSize   int
	Free        int // in the free queue (cached or not)
	FreeCached  int // free blocks still holding cached contents
	Used        int // held by at least one sequence
	Reserved    int
	Cached      int // blocks findable by hash (used or free)
	Sequences   int
	HitBlocks   uint64
	MissBlocks  uint64
	Revived     uint64 // hits on free cached blocks
	Evictions   uint64 // cached blocks reused
	Allocations uint64 // successful Allocate calls
}

// Pool is the block manager. See the package doc; not safe for concurrent use.
type Pool struct {
	cfg       Config
	blocks    []block
	free      freeQueue
	byHash    hashTable // cached blocks by hash
	seqs      map[SeqID]*sequence
	resv      map[SeqID][]BlockID
	pins      map[BlockID]int32 // references held by in-flight copies
	spare     []*sequence       // recycled sequence records
	hasher    prefixhash.Hasher
	scratch   []prefixhash.Hash
	evicted   []Evicted
	slab      tokenSlab // blocks' token ids
	sink      uint64    // what prefetch read, kept so its reads stay
	reserved  int
	freeCache int
	stats     Stats
}

// New returns a pool of cfg.NumBlocks free blocks. It never changes cfg.
func New(cfg Config) (*Pool, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	p := &Pool{
		cfg:    cfg,
		blocks: make([]block, cfg.NumBlocks),
		seqs:   make(map[SeqID]*sequence),
		resv:   make(map[SeqID][]BlockID),
	}
	p.byHash.init(p.blocks)
	p.slab.init(cfg.NumBlocks, cfg.BlockSize)
	p.free.init()
	for i := range p.blocks {
		p.free.pushTail(p.blocks, int32(i))
	}
	return p, nil
}

// Config returns the pool's configuration.
func (p *Pool) Config() Config { return p.cfg }

// NumFree is the number of blocks in the free queue.
func (p *Pool) NumFree() int { return p.free.n }

func (p *Pool) numBlocksFor(tokens int) int { return (tokens + p.cfg.BlockSize - 1) / p.cfg.BlockSize }

func (p *Pool) checkTokens(tokens []int64) error {
	if p.cfg.VocabSize <= 0 {
		return nil
	}
	v := int64(p.cfg.VocabSize)
	for i, t := range tokens {
		if t < 0 || t >= v {
			return fmt.Errorf("%w: token %d at index %d, vocabulary has %d", ErrTokenOutOfRange, t, i, v)
		}
	}
	return nil
}

// plan walks tokens and returns the full blocks' hashes (in p.scratch), the number of
// leading hits and how many of those hits are free cached blocks.
func (p *Pool) plan(tokens []int64, salt string) (hits, revive int) {
	bs := p.cfg.BlockSize
	p.scratch = p.hasher.Chain(p.scratch[:0], salt, tokens, bs)
	for i, h := range p.scratch {
		id, ok := p.byHash.get(h)
		if !ok || !slices.Equal(p.blocks[id].tokens, tokens[i*bs:(i+1)*bs]) {
			break
		}
		hits++
		if p.blocks[id].state == stateFree {
			revive++
		}
	}
	return hits, revive
}

// CanAllocate says whether Allocate of these tokens would find enough blocks now.
func (p *Pool) CanAllocate(seq SeqID, tokens []int64, salt string) bool {
	hits, revive := p.plan(tokens, salt)
	return p.numBlocksFor(len(tokens))-hits+revive <= p.free.n+len(p.resv[seq])
}

// CachedPrefix returns how many leading blocks of tokens are cached on this pool,
// and the chained hashes of all full blocks (appended to dst). It changes nothing.
func (p *Pool) CachedPrefix(dst []prefixhash.Hash, tokens []int64, salt string) (int, []prefixhash.Hash) {
	hits, _ := p.plan(tokens, salt)
	return hits, append(dst, p.scratch...)
}

// Allocate gives sequence seq a block table for tokens. Leading full blocks whose
// hash is cached and whose tokens match are shared (hits); the rest come from the
// seq's reservation, then from the head of the free queue. Newly filled full
// blocks are registered for later hits. On error nothing changes.
func (p *Pool) Allocate(seq SeqID, tokens []int64, salt string) (Allocation, error) {
	if len(tokens) == 0 {
		return Allocation{}, ErrEmptySequence
	}
	if _, ok := p.seqs[seq]; ok {
		return Allocation{}, fmt.Errorf("%w: %d", ErrSequenceExists, seq)
	}
	if err := p.checkTokens(tokens); err != nil {
		return Allocation{}, err
	}
	hits, revive := p.plan(tokens, salt)
	nb := p.numBlocksFor(len(tokens))
	resv := p.resv[seq]
	if need := nb - hits + revive; need > p.free.n+len(resv) {
		return Allocation{}, &NoSpaceError{Needed: need - len(resv), Free: p.free.n}
	}
	s := p.newSequence()
	bs := p.cfg.BlockSize
	for i := range hits {
		id, _ := p.byHash.get(p.scratch[i])
		p.hold(id)
		s.table = append(s.table, id)
	}
	p.prefetch(nb-hits-len(resv), p.scratch[hits:])
	for i := hits; i < nb; i++ {
		id := p.take(seq)
		s.table = append(s.table, id)
		if i < len(p.scratch) {
			p.register(id, p.scratch[i], tokens[i*bs:(i+1)*bs])
		}
	}
	s.numTokens = len(tokens)
	s.last, s.hasLast = prefixhash.Seed(salt)
	if n := len(p.scratch); n > 0 {
		s.last, s.hasLast = p.scratch[n-1], true
	}
	s.tail = append(s.tail[:0], tokens[len(p.scratch)*bs:]...)
	p.seqs[seq] = s
	p.stats.HitBlocks += uint64(hits)
	p.stats.MissBlocks += uint64(nb - hits)
	p.stats.Allocations++
	return Allocation{Blocks: slices.Clone(s.table), CachedTokens: hits * bs, HitBlocks: hits}, nil
}

// Deallocate drops sequence seq's hold on its blocks, tail first. Blocks whose count
// reaches zero become free; cached ones keep their contents and can be revived.
func (p *Pool) Deallocate(seq SeqID) error {
	s, ok := p.seqs[seq]
	if !ok {
		return fmt.Errorf("%w: %d", ErrUnknownSequence, seq)
	}
	for i := len(s.table) - 1; i >= 0; i-- {
		p.unhold(s.table[i])
	}
	delete(p.seqs, seq)
	s.table, s.tail = s.table[:0], s.tail[:0]
	p.spare = append(p.spare, s)
	return nil
}

// CanAppend says whether one more token for seq would find a block.
func (p *Pool) CanAppend(seq SeqID) (bool, error) {
	s, ok := p.seqs[seq]
	if !ok {
		return false, fmt.Errorf("%w: %d", ErrUnknownSequence, seq)
	}
	need := 0
	if s.numTokens%p.cfg.BlockSize == 0 {
		need = 1
	}
	return need <= p.free.n+len(p.resv[seq]), nil
}

// MayAppend adds one decoded token to seq: a new block when the last one was full,
// and hashing plus registration when the token fills the last block.
func (p *Pool) MayAppend(seq SeqID, token int64) error {
	return p.AppendTokens(seq, []int64{token})
}

// AppendTokens adds tokens to seq, all or nothing.
func (p *Pool) AppendTokens(seq SeqID, tokens []int64) error {
	s, ok := p.seqs[seq]
	if !ok {
		return fmt.Errorf("%w: %d", ErrUnknownSequence, seq)
	}
	if err := p.checkTokens(tokens); err != nil {
		return err
	}
	bs := p.cfg.BlockSize
	need := p.numBlocksFor(s.numTokens+len(tokens)) - len(s.table)
	if resv := len(p.resv[seq]); need > p.free.n+resv {
		return &NoSpaceError{Needed: need - resv, Free: p.free.n}
	}
	for _, t := range tokens {
		if s.numTokens%bs == 0 {
			s.table = append(s.table, p.take(seq))
		}
		s.tail = append(s.tail, t)
		s.numTokens++
		if len(s.tail) == bs {
			h := p.hasher.Block(s.last, s.hasLast, s.tail)
			p.register(s.table[len(s.table)-1], h, s.tail)
			s.last, s.hasLast = h, true
			s.tail = s.tail[:0]
		}
	}
	return nil
}

// Reserve sets n blocks aside for request id, all or nothing. A sequence with the
// same id draws from them before the free queue.
func (p *Pool) Reserve(id SeqID, n int) error {
	if n <= 0 {
		return fmt.Errorf("%w: reserve %d blocks", ErrBadArgument, n)
	}
	if _, ok := p.resv[id]; ok {
		return fmt.Errorf("%w: %d", ErrReservationExists, id)
	}
	if n > p.free.n {
		return &NoSpaceError{Needed: n, Free: p.free.n}
	}
	ids := make([]BlockID, 0, n)
	for range n {
		id := p.popFree()
		p.blocks[id].state = stateReserved
		ids = append(ids, id)
	}
	p.reserved += n
	p.resv[id] = ids
	return nil
}

// Release returns request id's unused reserved blocks to the free queue and ends
// its reservation.
func (p *Pool) Release(id SeqID) error {
	ids, ok := p.resv[id]
	if !ok {
		return fmt.Errorf("%w: %d", ErrUnknownReservation, id)
	}
	for _, b := range ids {
		p.blocks[b].state = stateFree
		p.free.pushHead(p.blocks, int32(b))
	}
	p.reserved -= len(ids)
	delete(p.resv, id)
	return nil
}

// Reserved returns how many blocks request id still holds in reserve.
func (p *Pool) Reserved(id SeqID) int { return len(p.resv[id]) }

// DrainEvicted appends the evictions since the last call to dst and forgets them.
func (p *Pool) DrainEvicted(dst []Evicted) []Evicted {
	dst = append(dst, p.evicted...)
	p.evicted = p.evicted[:0]
	return dst
}

// Table appends seq's block table to dst.
func (p *Pool) Table(dst []BlockID, seq SeqID) ([]BlockID, error) {
	s, ok := p.seqs[seq]
	if !ok {
		return dst, fmt.Errorf("%w: %d", ErrUnknownSequence, seq)
	}
	return append(dst, s.table...), nil
}

// NumTokens returns how many tokens seq holds.
func (p *Pool) NumTokens(seq SeqID) (int, error) {
	s, ok := p.seqs[seq]
	if !ok {
		return 0, fmt.Errorf("%w: %d", ErrUnknownSequence, seq)
	}
	return s.numTokens, nil
}

// BlockHash returns the hash block id holds and whether it is cached (findable).
func (p *Pool) BlockHash(id BlockID) (prefixhash.Hash, bool) {
	b := &p.blocks[id]
	return b.hash, b.cached
}

// RefCount returns block id's reference count.
func (p *Pool) RefCount(id BlockID) int { return int(p.blocks[id].ref) }

// Uncache makes block id unfindable by hash (its contents are no longer trusted,
// e.g. a load from a lower tier failed). Holders keep the block.
func (p *Pool) Uncache(id BlockID) {
	b := &p.blocks[id]
	if !b.cached {
		return
	}
	p.byHash.remove(b.hash, id)
	b.cached = false
	if b.state == stateFree {
		p.freeCache--
		p.free.remove(p.blocks, int32(id))
		p.free.pushHead(p.blocks, int32(id))
	}
}

// Lookup returns the cached block holding hash.
func (p *Pool) Lookup(h prefixhash.Hash) (BlockID, bool) {
	return p.byHash.get(h)
}

// FreeCached calls fn for free cached blocks from the next to be evicted onward,
// until fn returns false.
func (p *Pool) FreeCached(fn func(BlockID, prefixhash.Hash) bool) {
	for id := p.free.head; id != none; id = p.blocks[id].next {
		if b := &p.blocks[id]; b.cached && !fn(BlockID(id), b.hash) {
			return
		}
	}
}

// Stats returns a snapshot of the pool's counters.
func (p *Pool) Stats() Stats {
	s := p.stats
	s.NumBlocks, s.BlockSize = p.cfg.NumBlocks, p.cfg.BlockSize
	s.Free, s.FreeCached, s.Reserved = p.free.n, p.freeCache, p.reserved
	s.Used = p.cfg.NumBlocks - p.free.n - p.reserved
	s.Cached, s.Sequences = p.byHash.len(), len(p.seqs)
	return s
}

func (p *Pool) newSequence() *sequence {
	if n := len(p.spare); n > 0 {
		s := p.spare[n-1]
		p.spare = p.spare[:n-1]
		return s
	}
	return &sequence{}
}

// prefetch brings into cache the hash table slots that taking the next n blocks
// of the free queue and registering hashes will touch: those of the new hashes,
// and those of the hashes the taken blocks hold (each is removed when its block
// is evicted). The reads do not depend on each other, so their cache misses
// overlap, with each other and with the walk down the free queue, instead of
// stalling one at a time. A hint only: it changes nothing but p.sink.
func (p *Pool) prefetch(n int, hashes []prefixhash.Hash) {
	x := p.byHash.touch(hashes)
	for id := p.free.head; id != none && n > 0; id, n = p.blocks[id].next, n-1 {
		if b := &p.blocks[id]; b.cached {
			x ^= p.byHash.touchOne(b.hash)
		}
	}
	p.sink += x
}

// hold adds a reference to a cached block found by hash, reviving it if free.
func (p *Pool) hold(id BlockID) {
	b := &p.blocks[id]
	if b.state == stateFree {
		p.free.remove(p.blocks, int32(id))
		p.freeCache--
		p.stats.Revived++
		b.state = stateUsed
	}
	b.ref++
}

// unhold drops a reference; at zero the block goes to the free queue.
func (p *Pool) unhold(id BlockID) {
	b := &p.blocks[id]
	if b.ref <= 0 || b.state != stateUsed {
		panic(fmt.Sprintf("kvtier: blockpool: reference count underflow on block %d (ref %d, state %d)", id, b.ref, b.state))
	}
	b.ref--
	if b.ref > 0 {
		return
	}
	b.state = stateFree
	if b.cached {
		p.free.pushTail(p.blocks, int32(id))
		p.freeCache++
	} else {
		p.free.pushHead(p.blocks, int32(id))
	}
}

// take gives seq a fresh block with one reference: from its reservation first.
func (p *Pool) take(seq SeqID) BlockID {
	var id BlockID
	if r := p.resv[seq]; len(r) > 0 {
		id = r[len(r)-1]
		p.resv[seq] = r[:len(r)-1]
		p.reserved--
	} else {
		id = p.popFree()
	}
	b := &p.blocks[id]
	b.state, b.ref = stateUsed, 1
	return id
}

// popFree takes the free queue's head, evicting its cached contents.
func (p *Pool) popFree() BlockID {
	i := p.free.popHead(p.blocks)
	if i == none {
		panic("kvtier: blockpool: free queue empty after a successful capacity check")
	}
	b := &p.blocks[i]
	if b.cached {
		p.byHash.remove(b.hash, BlockID(i))
		p.evicted = append(p.evicted, Evicted{Block: BlockID(i), Hash: b.hash})
		p.freeCache--
		p.stats.Evictions++
	}
	b.cached, b.hash, b.tokens = false, 0, b.tokens[:0]
	return BlockID(i)
}

// register records that block id holds the full block tokens with hash h. The first
// block registered for a hash keeps it; a duplicate stays unfindable.
func (p *Pool) register(id BlockID, h prefixhash.Hash, tokens []int64) {
	b := &p.blocks[id]
	b.hash = h
	p.setTokens(id, tokens)
	b.cached = p.byHash.add(h, id)
}

// setTokens copies a full block's tokens into block id's place in the slab.
func (p *Pool) setTokens(id BlockID, tokens []int64) {
	b := &p.blocks[id]
	if cap(b.tokens) == 0 {
		b.tokens = p.slab.block(id)
	}
	b.tokens = append(b.tokens[:0], tokens...)
}
