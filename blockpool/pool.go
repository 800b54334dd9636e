package blockpool

import (
	"fmt"
	"math"
	"slices"
	"unsafe"

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
	// Digests keeps a prefixhash.Digest (SHA-256 over the namespace and the
	// whole prefix) for every full block, for tiers below the pool: Keys must
	// then carry digests, evictions report them and BlockDigest answers. Hits
	// never depend on digests (see "Hits are exact" in the package doc), so a
	// pool with no tier below leaves it off and hashes only xxh64.
	Digests bool
	// Journal records every change of what the pool serves by hash (a block
	// published, a cached block evicted or uncached), in order, for
	// DrainJournal: the residency events a KV-aware router consumes.
	Journal bool
}

func (c Config) validate() error {
	switch {
	case c.NumBlocks <= 0:
		return fmt.Errorf("%w: NumBlocks %d must be >= 1", ErrBadConfig, c.NumBlocks)
	case c.NumBlocks > 1<<31-1:
		return fmt.Errorf("%w: NumBlocks %d exceeds %d", ErrBadConfig, c.NumBlocks, 1<<31-1)
	case c.BlockSize <= 0:
		return fmt.Errorf("%w: BlockSize %d must be >= 1", ErrBadConfig, c.BlockSize)
	case c.BlockSize > (math.MaxInt/2)/c.NumBlocks:
		// Token counts (a sequence's, with lookahead, rounded up to whole
		// blocks) must not wrap.
		return fmt.Errorf("%w: %d blocks of %d tokens: the pool's tokens overflow an int", ErrBadConfig, c.NumBlocks, c.BlockSize)
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

// block is one block's metadata: 64 bytes. Its token ids live in the pool's slab.
type block struct {
	tokens     []int64 // a full block's tokens, kept to confirm hits: its place in p.slab
	hash       prefixhash.Hash
	ref        int32
	prev, next int32 // free queue links
	// parent is the block that held the previous block of the prefix when
	// this one was filled or committed (none for a chain's first block), and
	// pgen its gen then: the link holds while the parent keeps its contents.
	parent int32
	pgen   uint32
	gen    uint32 // bumped each time the block's contents are dropped
	// ns is the namespace (an id of p.ns) of the block's chain: set on a
	// chain's first block when filled and handed down to each block linked
	// after it, so that every linked block names its chain's namespace in
	// O(1) even once a link on the way was reused. Each block holds a
	// reference to its id.
	ns     uint32
	state  blockState
	cached bool // byHash maps hash to this block
	// queuedPin marks a block that copies pinned while it was free (an
	// offload ahead of need): it keeps its place in the free queue, so the
	// copy does not change when it is evicted, but is not taken until the
	// last pin goes (Pool.Pin). Its state is stateUsed meanwhile.
	queuedPin bool
}

type sequence struct {
	table      []BlockID // blocksFor(numTokens) blocks, then lookahead slots
	numTokens  int
	committed  int             // leading tokens the owner said hold computed KV
	tail       []int64         // tokens of the last block while it is partial
	last       prefixhash.Hash // hash before the next block to fill
	hasLast    bool
	lastDigest prefixhash.Digest // digest before the next block to fill
	ns         string            // namespace key
}

// Evicted is a cached block whose contents were dropped because the block was
// reused. Hash is what it held.
//
// With Config.Digests (a tier below keeps what the pool drops) it also says
// where the block sat in its chain, as a journal Change does, for the tier
// below to record with its copy: Tokens are a copy of its token ids (nil
// when the chain is not known: the block's parent was reused before it),
// Parent its parent's hash when HasParent, NS its chain's namespace key.
// Tokens live in a slab of the pool's shared by up to 64 blocks' evictions
// and never written again once handed out by DrainEvicted.
type Evicted struct {
	Block     BlockID
	Hash      prefixhash.Hash
	Digest    prefixhash.Digest
	Parent    prefixhash.Hash
	HasParent bool
	Tokens    []int64
	NS        string
}

// Keys are the chained hashes and digests of a prompt's full blocks in one
// namespace. ComputeKeys fills them on any goroutine, so that a pool's owner
// need not hash big prompts itself.
type Keys struct {
	NS      string // the namespace key (prefixhash.Namespace.Key)
	Hashes  []prefixhash.Hash
	Digests []prefixhash.Digest
}

// ComputeKeys hashes every full block of tokens, blocks of blockSize tokens, in
// namespace ns; with digests, it computes their digests too (for a pool with
// Config.Digests).
func ComputeKeys(ns string, tokens []int64, blockSize int, digests bool) *Keys {
	var h prefixhash.Hasher
	k := &Keys{NS: ns, Hashes: h.Chain(nil, ns, tokens, blockSize)}
	if digests {
		var d prefixhash.Digester
		k.Digests = d.Chain(nil, ns, tokens, blockSize)
	}
	return k
}

// Request asks Pool.Allocate for a sequence's blocks.
type Request struct {
	Seq    SeqID
	Tokens []int64
	// NS is the namespace key (prefixhash.Namespace.Key): blocks of different
	// namespaces never match.
	NS string
	// Keys, when not nil, are Tokens' keys in NS (ComputeKeys); nil: the pool
	// computes them.
	Keys *Keys
	// Lookahead adds blocks for this many tokens past Tokens (slots the
	// caller may write before it appends their tokens, e.g. speculative
	// drafts).
	Lookahead int
	// MaxHits, when > 0, caps the leading blocks reused from the cache;
	// < 0 reuses none. Blocks past the cap are allocated fresh, to be
	// computed (a tensor-parallel group agreeing on a shorter hit).
	MaxHits int
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
	cfg      Config
	blocks   []block
	free     freeQueue
	byHash   hashTable // cached blocks by hash
	seqs     map[SeqID]*sequence
	resv     map[SeqID][]BlockID
	pins     map[BlockID]int32 // references held by in-flight copies
	spare    []*sequence       // recycled sequence records
	hasher   prefixhash.Hasher
	digester prefixhash.Digester
	digests  []prefixhash.Digest // a filled block's digest, by block id
	scratch  []prefixhash.Hash
	planned  []BlockID // the hits the last plan found, in order
	nsMemo   nsMemo
	dscratch []prefixhash.Digest
	evicted  []Evicted
	// evictedTokens is the slab Evicted.Tokens are copied into.
	evictedTokens []int64
	journal       journal
	slab          tokenSlab // blocks' token ids
	ns            nsTable   // namespaces of chains' first blocks
	sink          uint64    // what prefetch read, kept so its reads stay
	reserved      int
	freeCache     int
	queuedPins    int // blocks in the free queue that copies pin (queuedPin)
	stats         Stats
}

// MetadataBytes estimates the host memory a pool of cfg takes: per block its
// metadata, digest, token ids and hash-table entry. Callers check it before
// New, whose allocations cannot fail gracefully.
func MetadataBytes(cfg Config) int64 {
	perBlock := int64(unsafe.Sizeof(block{})) + 8*int64(cfg.BlockSize) + 16
	if cfg.Digests {
		perBlock += int64(len(prefixhash.Digest{}))
	}
	return int64(cfg.NumBlocks) * perBlock
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
	if cfg.Digests {
		p.digests = make([]prefixhash.Digest, cfg.NumBlocks)
	}
	p.byHash.init(p.blocks)
	p.slab.init(cfg.NumBlocks, cfg.BlockSize)
	p.free.init()
	for i := range p.blocks {
		p.blocks[i].parent = none // linked to nothing (block 0 is not its own parent)
		p.free.pushTail(p.blocks, int32(i))
	}
	return p, nil
}

// Config returns the pool's configuration.
func (p *Pool) Config() Config { return p.cfg }

// NumFree is the number of blocks in the free queue that can be taken now
// (not those a copy pins in place).
func (p *Pool) NumFree() int { return p.numFree() }

func (p *Pool) numFree() int { return p.free.n - p.queuedPins }

func (p *Pool) numBlocksFor(tokens int) int { return (tokens + p.cfg.BlockSize - 1) / p.cfg.BlockSize }

// checkLookahead refuses a lookahead below 0 (ErrBadArgument) or beyond
// the pool's whole capacity in tokens (a *NoSpaceError: it can never fit),
// before any arithmetic on it: near math.MaxInt the block count wrapped
// below zero, leaving a sequence with no blocks, or a panic.
func (p *Pool) checkLookahead(n int) error {
	if n < 0 {
		return fmt.Errorf("%w: lookahead %d", ErrBadArgument, n)
	}
	if n > p.cfg.NumBlocks*p.cfg.BlockSize {
		return &NoSpaceError{Needed: (n-1)/p.cfg.BlockSize + 1, Free: p.numFree()} // ceil, without n+BlockSize's overflow
	}
	return nil
}

func (p *Pool) checkTokens(tokens []int64) error {
	return CheckTokens(tokens, p.cfg.VocabSize)
}

// CheckTokens returns an error wrapping ErrTokenOutOfRange, naming the first
// offending token and its index, when a token of tokens is outside [0,
// vocab); a vocab <= 0 accepts every token, as Config.VocabSize does.
func CheckTokens(tokens []int64, vocab int) error {
	if vocab <= 0 {
		return nil
	}
	v := int64(vocab)
	for i, t := range tokens {
		if t < 0 || t >= v {
			return fmt.Errorf("%w: token %d at index %d, vocabulary has %d", ErrTokenOutOfRange, t, i, v)
		}
	}
	return nil
}

// keys returns the keys of tokens in ns: k itself when given (checked against
// the tokens' block count), else computed into the pool's scratch.
func (p *Pool) keys(tokens []int64, ns string, k *Keys) (*Keys, error) {
	full := len(tokens) / p.cfg.BlockSize
	if k != nil {
		if len(k.Hashes) != full || (p.cfg.Digests && len(k.Digests) != full) || k.NS != ns {
			return nil, fmt.Errorf("%w: keys for %d blocks (%d digests) in namespace %q, prompt has %d full blocks in %q",
				ErrBadArgument, len(k.Hashes), len(k.Digests), k.NS, full, ns)
		}
		return k, nil
	}
	p.scratch = p.hasher.Chain(p.scratch[:0], ns, tokens, p.cfg.BlockSize)
	k = &Keys{NS: ns, Hashes: p.scratch}
	if p.cfg.Digests {
		p.dscratch = p.digester.Chain(p.dscratch[:0], ns, tokens, p.cfg.BlockSize)
		k.Digests = p.dscratch
	}
	return k, nil
}

// plan returns the number of leading hits of tokens with keys k and how many of
// those hits are free cached blocks, and leaves the hits in p.planned. A hit is
// a committed block whose hash and tokens match and that follows the previous
// hit (or, first, starts a chain of the same namespace): the tokens of the
// whole prefix are compared, so a forged 64-bit hash collision is never a hit,
// and, as every block holding a hash is a candidate, a forged chain committed
// first does not keep the real one out either.
func (p *Pool) plan(tokens []int64, k *Keys) (hits, revive int) {
	return p.planLimit(tokens, k, 0)
}

// planLimit is plan with at most limit hits (limit > 0), or none (limit < 0).
func (p *Pool) planLimit(tokens []int64, k *Keys, limit int) (hits, revive int) {
	bs := p.cfg.BlockSize
	hashes := k.Hashes
	switch {
	case limit < 0:
		return 0, 0
	case limit > 0 && limit < len(hashes):
		hashes = hashes[:limit]
	}
	p.planned = p.planned[:0]
	prev := int32(none)
	nsID, ok := p.ns.find(k.NS)
	if !ok {
		return 0, 0 // no chain of this namespace is held
	}
	for i, h := range hashes {
		id, ok := p.hitAfter(h, prev, nsID, tokens[i*bs:(i+1)*bs])
		if !ok {
			break
		}
		p.planned = append(p.planned, id)
		hits++
		if p.blocks[id].state == stateFree {
			revive++
		}
		prev = int32(id)
	}
	return hits, revive
}

// hitAfter returns the cached block holding hash h and tokens toks that
// follows block prev (see follows), among every block holding h.
func (p *Pool) hitAfter(h prefixhash.Hash, prev int32, ns uint32, toks []int64) (BlockID, bool) {
	for id := range p.byHash.all(h) {
		if p.follows(id, prev, ns) && slices.Equal(p.blocks[id].tokens, toks) {
			return id, true
		}
	}
	return 0, false
}

// follows says whether block id comes right after block prev in its prefix
// (prev still holding what it held then), or, when prev is none, starts a
// chain of namespace ns (an id of p.ns).
func (p *Pool) follows(id BlockID, prev int32, ns uint32) bool {
	b := &p.blocks[id]
	if prev == none {
		return b.parent == none && b.ns == ns
	}
	return b.parent == prev && b.pgen == p.blocks[prev].gen
}

// CachedChain appends to dst the committed blocks that hold the leading blocks
// of tokens with keys k, verified as Allocate verifies hits. It changes
// nothing.
func (p *Pool) CachedChain(dst []BlockID, tokens []int64, k *Keys) ([]BlockID, error) {
	if k == nil {
		return dst, fmt.Errorf("%w: no keys", ErrBadArgument)
	}
	k, err := p.keys(tokens, k.NS, k)
	if err != nil {
		return dst, err
	}
	p.plan(tokens, k)
	return append(dst, p.planned...), nil
}

// CanAllocate says whether Allocate of these tokens would succeed now: false
// for what Allocate refuses (no tokens, a sequence that exists, a token out
// of the vocabulary) as for too few free blocks.
func (p *Pool) CanAllocate(seq SeqID, tokens []int64, salt string) bool {
	if _, exists := p.seqs[seq]; exists || len(tokens) == 0 || p.checkTokens(tokens) != nil {
		return false
	}
	k, _ := p.keys(tokens, salt, nil)
	hits, revive := p.plan(tokens, k)
	return p.numBlocksFor(len(tokens))-hits+revive <= p.numFree()+len(p.resv[seq])
}

// CachedPrefix returns how many leading blocks of tokens are cached on this pool,
// and the chained hashes of all full blocks (appended to dst). It changes nothing.
func (p *Pool) CachedPrefix(dst []prefixhash.Hash, tokens []int64, salt string) (int, []prefixhash.Hash) {
	k, _ := p.keys(tokens, salt, nil)
	hits, _ := p.plan(tokens, k)
	return hits, append(dst, k.Hashes...)
}

// CachedBlocks returns how many leading blocks of a prompt with keys k are
// committed on this pool. It changes nothing.
func (p *Pool) CachedBlocks(tokens []int64, k *Keys) (int, error) {
	if k == nil {
		return 0, fmt.Errorf("%w: no keys", ErrBadArgument)
	}
	k, err := p.keys(tokens, k.NS, k)
	if err != nil {
		return 0, err
	}
	hits, _ := p.plan(tokens, k)
	return hits, nil
}

// Allocate gives sequence seq a block table for tokens in namespace salt (a
// prefixhash.Namespace key); see AllocateRequest.
func (p *Pool) Allocate(seq SeqID, tokens []int64, salt string) (Allocation, error) {
	return p.AllocateRequest(Request{Seq: seq, Tokens: tokens, NS: salt})
}

// AllocateRequest gives sequence r.Seq a block table for r.Tokens plus
// r.Lookahead tokens. Leading full blocks that are committed (a hash, digest and
// tokens match) are shared (hits); the rest come from the seq's reservation,
// then from the head of the free queue. New full blocks get their hash, digest
// and tokens but stay unfindable until Commit says their KV is computed. On
// error nothing changes.
func (p *Pool) AllocateRequest(r Request) (Allocation, error) {
	seq, tokens := r.Seq, r.Tokens
	if len(tokens) == 0 {
		return Allocation{}, ErrEmptySequence
	}
	if err := p.checkLookahead(r.Lookahead); err != nil {
		return Allocation{}, err
	}
	if _, ok := p.seqs[seq]; ok {
		return Allocation{}, fmt.Errorf("%w: %d", ErrSequenceExists, seq)
	}
	if err := p.checkTokens(tokens); err != nil {
		return Allocation{}, err
	}
	k, err := p.keys(tokens, r.NS, r.Keys)
	if err != nil {
		return Allocation{}, err
	}
	hits, revive := p.planLimit(tokens, k, r.MaxHits)
	nb := p.numBlocksFor(len(tokens) + r.Lookahead)
	resv := p.resv[seq]
	if need := nb - hits + revive; need > p.numFree()+len(resv) {
		return Allocation{}, &NoSpaceError{Needed: need - len(resv), Free: p.numFree()}
	}
	s := p.newSequence()
	bs := p.cfg.BlockSize
	for _, id := range p.planned[:hits] {
		p.hold(id)
		s.table = append(s.table, id)
	}
	p.prefetch(nb-hits-len(resv), k.Hashes[hits:])
	for i := hits; i < nb; i++ {
		id := p.take(seq)
		s.table = append(s.table, id)
		if i < len(k.Hashes) {
			var d prefixhash.Digest
			if p.cfg.Digests {
				d = k.Digests[i]
			}
			p.fill(id, k.Hashes[i], d, tokens[i*bs:(i+1)*bs], s.table, r.NS)
		}
	}
	s.numTokens = len(tokens)
	s.committed = hits * bs
	s.last, s.hasLast = prefixhash.Seed(r.NS)
	s.ns = r.NS
	if p.cfg.Digests {
		s.lastDigest = prefixhash.DigestSeed(r.NS)
	}
	if n := len(k.Hashes); n > 0 {
		s.last, s.hasLast = k.Hashes[n-1], true
		if p.cfg.Digests {
			s.lastDigest = k.Digests[n-1]
		}
	}
	s.tail = append(s.tail[:0], tokens[len(k.Hashes)*bs:]...)
	p.seqs[seq] = s
	p.stats.HitBlocks += uint64(hits)
	p.stats.MissBlocks += uint64(p.numBlocksFor(len(tokens)) - hits)
	p.stats.Allocations++
	return Allocation{Blocks: slices.Clone(s.table), CachedTokens: hits * bs, HitBlocks: hits}, nil
}

// AllTokens commits every token a sequence holds.
const AllTokens = -1

// Commit says that the first tokens tokens of seq hold computed KV (AllTokens:
// all of them). Every full
// block among them becomes committed: findable by later allocations, and a
// candidate for offload. Commit appends the blocks it made findable to dst.
// Commits below the sequence's committed count change nothing; more tokens
// than the sequence holds, or a negative count other than AllTokens, is
// ErrBadCommit, and nothing changes.
func (p *Pool) Commit(seq SeqID, tokens int, dst []BlockID) ([]BlockID, error) {
	dst, _, _, err := p.CommitSpan(seq, tokens, dst)
	return dst, err
}

// CommitSpan is Commit, also returning the sequence's committed token count
// before and after it (was = now when it covered nothing new), in the one
// lookup of seq a commit on the decode path can afford.
func (p *Pool) CommitSpan(seq SeqID, tokens int, dst []BlockID) (_ []BlockID, was, now int, err error) {
	s, ok := p.seqs[seq]
	if !ok {
		return dst, 0, 0, fmt.Errorf("%w: %d", ErrUnknownSequence, seq)
	}
	if tokens == AllTokens {
		tokens = s.numTokens
	}
	was = s.committed
	if tokens < 0 {
		return dst, was, was, fmt.Errorf("%w: negative token count %d (AllTokens is %d), sequence %d", ErrBadCommit, tokens, AllTokens, seq)
	}
	if tokens > s.numTokens {
		return dst, was, was, fmt.Errorf("%w: commit of %d tokens, sequence %d holds %d", ErrBadCommit, tokens, seq, s.numTokens)
	}
	bs := p.cfg.BlockSize
	for i := s.committed / bs; i < tokens/bs; i++ {
		id := s.table[i]
		p.relink(s.table[:i+1])
		if p.publish(id, s.ns) {
			dst = append(dst, id)
		}
	}
	s.committed = max(s.committed, tokens)
	return dst, was, s.committed, nil
}

// Committed returns how many leading tokens of seq are committed.
func (p *Pool) Committed(seq SeqID) (int, error) {
	s, ok := p.seqs[seq]
	if !ok {
		return 0, fmt.Errorf("%w: %d", ErrUnknownSequence, seq)
	}
	return s.committed, nil
}

// Deallocate drops sequence seq's hold on its blocks, tail first. Blocks whose count
// reaches zero become free; committed ones keep their contents and can be
// revived. Blocks never committed are discarded (an abort): they go to the free
// queue's head with no contents.
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
	need := max(0, p.numBlocksFor(s.numTokens+1)-len(s.table))
	return need <= p.numFree()+len(p.resv[seq]), nil
}

// MayAppend adds one decoded token to seq: a new block when the last one was full,
// and hashing when the token fills the last block.
func (p *Pool) MayAppend(seq SeqID, token int64) error {
	_, err := p.AppendTokens(seq, []int64{token}, 0, nil)
	return err
}

// AppendTokens adds tokens to seq, all or nothing, and makes sure its table has
// slots for lookahead more tokens after them. A block the tokens fill gets its
// hash and digest; it becomes findable only when Commit covers it. The blocks
// taken are appended to dst, in table order.
func (p *Pool) AppendTokens(seq SeqID, tokens []int64, lookahead int, dst []BlockID) ([]BlockID, error) {
	s, ok := p.seqs[seq]
	if !ok {
		return dst, fmt.Errorf("%w: %d", ErrUnknownSequence, seq)
	}
	if err := p.checkLookahead(lookahead); err != nil {
		return dst, err
	}
	if err := p.checkTokens(tokens); err != nil {
		return dst, err
	}
	bs := p.cfg.BlockSize
	need := p.numBlocksFor(s.numTokens+len(tokens)+lookahead) - len(s.table)
	if resv := len(p.resv[seq]); need > p.numFree()+resv {
		return dst, &NoSpaceError{Needed: need - resv, Free: p.numFree()}
	}
	for _, t := range tokens {
		if s.numTokens/bs == len(s.table) {
			id := p.take(seq)
			s.table = append(s.table, id)
			dst = append(dst, id)
		}
		s.tail = append(s.tail, t)
		s.numTokens++
		if len(s.tail) == bs {
			h := p.hasher.Block(s.last, s.hasLast, s.tail)
			var d prefixhash.Digest
			if p.cfg.Digests {
				d = p.digester.Block(s.lastDigest, s.tail)
			}
			p.fill(s.table[s.numTokens/bs-1], h, d, s.tail, s.table[:s.numTokens/bs], s.ns)
			s.last, s.hasLast, s.lastDigest = h, true, d
			s.tail = s.tail[:0]
		}
	}
	for len(s.table) < p.numBlocksFor(s.numTokens+lookahead) {
		id := p.take(seq)
		s.table = append(s.table, id)
		dst = append(dst, id)
	}
	return dst, nil
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
	if n > p.numFree() {
		return &NoSpaceError{Needed: n, Free: p.numFree()}
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

// DrainEvicted appends the evictions since the last call to dst and forgets
// them. The caller owns their Tokens.
func (p *Pool) DrainEvicted(dst []Evicted) []Evicted {
	dst = append(dst, p.evicted...)
	p.evicted = p.evicted[:0]
	// As the journal's: the pool only appends past what it handed out.
	p.evictedTokens = p.evictedTokens[len(p.evictedTokens):]
	return dst
}

// evictedChain records in e the chain of b, a cached block being evicted
// (still linked): its parent and namespace, and a copy of its tokens.
func (p *Pool) evictedChain(e *Evicted, b *block) {
	parent, hasParent, ok := p.parentOf(b)
	if !ok || len(b.tokens) != p.cfg.BlockSize {
		return
	}
	e.Parent, e.HasParent, e.NS = parent, hasParent, p.ns.key(b.ns)
	if cap(p.evictedTokens)-len(p.evictedTokens) < len(b.tokens) {
		// A fixed size, not doubled: a lower tier keeps a block's tokens
		// while it holds the block, and with them the whole slab.
		p.evictedTokens = make([]int64, 0, 64*p.cfg.BlockSize)
	}
	start := len(p.evictedTokens)
	p.evictedTokens = append(p.evictedTokens, b.tokens...)
	e.Tokens = p.evictedTokens[start:len(p.evictedTokens):len(p.evictedTokens)]
}

// parentOf returns the hash of b's parent, or hasParent false for a chain's
// first block; ok is false when b has a parent whose block was reused since
// (its hash is no longer known).
func (p *Pool) parentOf(b *block) (parent prefixhash.Hash, hasParent, ok bool) {
	if b.parent == none {
		return 0, false, true
	}
	if pb := &p.blocks[b.parent]; pb.gen == b.pgen {
		return pb.hash, true, true
	}
	return 0, false, false
}

// BlockChain returns where the full block id sits in its chain, as
// Evicted says it: its parent's hash when hasParent and its chain's
// namespace key; ok is false when the block holds no full block or its
// parent was reused since. Its tokens are BlockTokens'.
func (p *Pool) BlockChain(id BlockID) (parent prefixhash.Hash, hasParent bool, ns string, ok bool) {
	b := p.at(id, "chain")
	if len(b.tokens) != p.cfg.BlockSize {
		return 0, false, "", false
	}
	if parent, hasParent, ok = p.parentOf(b); !ok {
		return 0, false, "", false
	}
	return parent, hasParent, p.ns.key(b.ns), true
}

// Table appends seq's block table to dst.
func (p *Pool) Table(dst []BlockID, seq SeqID) ([]BlockID, error) {
	s, ok := p.seqs[seq]
	if !ok {
		return dst, fmt.Errorf("%w: %d", ErrUnknownSequence, seq)
	}
	return append(dst, s.table...), nil
}

// TableRange appends to dst the blocks at positions [from, to) of seq's
// block table (cut at its end): what Table gives, without copying the
// whole table.
func (p *Pool) TableRange(dst []BlockID, seq SeqID, from, to int) ([]BlockID, error) {
	s, ok := p.seqs[seq]
	if !ok {
		return dst, fmt.Errorf("%w: %d", ErrUnknownSequence, seq)
	}
	to = min(to, len(s.table))
	if from < 0 || from > to {
		return dst, nil
	}
	return append(dst, s.table[from:to]...), nil
}

// NumTokens returns how many tokens seq holds.
func (p *Pool) NumTokens(seq SeqID) (int, error) {
	s, ok := p.seqs[seq]
	if !ok {
		return 0, fmt.Errorf("%w: %d", ErrUnknownSequence, seq)
	}
	return s.numTokens, nil
}

// BlockHash returns the hash block id holds and whether it is cached (committed
// and findable).
func (p *Pool) BlockHash(id BlockID) (prefixhash.Hash, bool) {
	b := p.at(id, "hash")
	return b.hash, b.cached
}

// BlockDigest returns the digest of the full block id holds; ok is false when it
// holds no full block or the pool keeps no digests (Config.Digests).
func (p *Pool) BlockDigest(id BlockID) (d prefixhash.Digest, ok bool) {
	if b := p.at(id, "digest"); !p.cfg.Digests || len(b.tokens) != p.cfg.BlockSize {
		return d, false
	}
	return p.digests[id], true
}

// BlockTokens returns the token ids of the full block id holds (nil when it
// holds none). The slice is the pool's: read it before the next call.
func (p *Pool) BlockTokens(id BlockID) []int64 {
	if b := p.at(id, "tokens"); len(b.tokens) == p.cfg.BlockSize {
		return b.tokens
	}
	return nil
}

// at returns block id's metadata for the owner's call op. An id outside the
// pool is the owner's bug: it panics with an assertion naming op, the id and
// the range, rather than Go's bare index error.
func (p *Pool) at(id BlockID, op string) *block {
	if id < 0 || int(id) >= len(p.blocks) {
		panic(fmt.Sprintf("kvtier: blockpool: %s of block %d outside [0, %d)", op, id, len(p.blocks)))
	}
	return &p.blocks[id]
}

// RefCount returns block id's reference count.
func (p *Pool) RefCount(id BlockID) int { return int(p.at(id, "reference count").ref) }

// Uncache makes block id unfindable by hash (its contents are no longer trusted,
// e.g. a load from a lower tier failed). Holders keep the block.
func (p *Pool) Uncache(id BlockID) {
	b := p.at(id, "uncache")
	if !b.cached {
		return
	}
	p.byHash.remove(b.hash, id)
	b.cached = false
	p.journalGone(b.hash)
	if b.state == stateFree {
		p.freeCache--
		p.free.remove(p.blocks, int32(id))
		p.free.pushHead(p.blocks, int32(id))
	}
}

// Lookup returns a cached block holding hash (one of them: a forged 64-bit
// collision, or a block left unreachable when its prefix was uncached, may
// hold it too; see Holders).
func (p *Pool) Lookup(h prefixhash.Hash) (BlockID, bool) {
	return p.byHash.get(h)
}

// Holders appends to dst every cached block holding hash.
func (p *Pool) Holders(dst []BlockID, h prefixhash.Hash) []BlockID {
	return slices.AppendSeq(dst, p.byHash.all(h))
}

// FreeCached calls fn for the cached blocks of the free queue from the next to
// be evicted onward, until fn returns false. Blocks a copy pins in place
// (Pin) are included: they are where they will be once the copy is done.
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
	s.Free, s.FreeCached, s.Reserved = p.numFree(), p.freeCache, p.reserved
	s.Used = p.cfg.NumBlocks - p.numFree() - p.reserved
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
// is evicted); and the ends of those blocks' token places. The reads do not depend on each other, so their cache misses
// overlap, with each other and with the walk down the free queue, instead of
// stalling one at a time. A hint only: it changes nothing but p.sink.
func (p *Pool) prefetch(n int, hashes []prefixhash.Hash) {
	x := p.byHash.touch(hashes)
	for id := p.free.head; id != none && n > 0; id, n = p.blocks[id].next, n-1 {
		b := &p.blocks[id]
		if b.cached {
			x ^= p.byHash.touchOne(b.hash)
		}
		// The first and last words of its place in the token slab, which
		// the block's new tokens overwrite.
		if t := b.tokens[:cap(b.tokens)]; len(t) > 0 {
			x ^= uint64(t[0]) ^ uint64(t[len(t)-1])
		}
	}
	p.sink += x
}

// hold adds a reference to a cached block found by hash, reviving it if free.
// A block a copy pins in the free queue leaves the queue: a sequence uses it.
func (p *Pool) hold(id BlockID) {
	b := &p.blocks[id]
	if b.queuedPin {
		p.free.remove(p.blocks, int32(id))
		b.queuedPin = false
		p.queuedPins--
		p.stats.Revived++
	}
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
	if b.queuedPin { // still in the free queue, at its place
		b.queuedPin = false
		p.queuedPins--
		if b.cached {
			p.freeCache++
		} else { // uncached meanwhile: taken before cached blocks
			p.free.remove(p.blocks, int32(id))
			p.free.pushHead(p.blocks, int32(id))
		}
		return
	}
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

// popFree takes the first block of the free queue that no copy pins,
// evicting its cached contents.
func (p *Pool) popFree() BlockID {
	i := p.free.head
	for i != none && p.blocks[i].queuedPin {
		i = p.blocks[i].next
	}
	if i == none {
		panic("kvtier: blockpool: free queue empty after a successful capacity check")
	}
	p.free.remove(p.blocks, i)
	b := &p.blocks[i]
	if b.cached {
		p.byHash.remove(b.hash, BlockID(i))
		p.journalGone(b.hash)
		e := Evicted{Block: BlockID(i), Hash: b.hash}
		if p.cfg.Digests {
			e.Digest = p.digests[i]
			p.evictedChain(&e, b)
		}
		p.evicted = append(p.evicted, e)
		p.freeCache--
		p.stats.Evictions++
	}
	p.unlink(b)
	b.cached, b.hash, b.tokens = false, 0, b.tokens[:0]
	b.gen++ // links to what it held are broken
	return BlockID(i)
}

// fill records that block id, the last of table (the sequence's blocks up to
// it), holds the full block tokens with hash h and digest d in namespace ns.
// The block stays unfindable until publish.
func (p *Pool) fill(id BlockID, h prefixhash.Hash, d prefixhash.Digest, tokens []int64, table []BlockID, ns string) {
	b := &p.blocks[id]
	b.hash = h
	if p.cfg.Digests {
		p.digests[id] = d
	}
	p.link(id, table, ns)
	p.setTokens(id, tokens)
}

// link points block id, the last of table, at the block before it in table, or
// marks it a chain's first block in namespace ns.
func (p *Pool) link(id BlockID, table []BlockID, ns string) {
	b := &p.blocks[id]
	p.unlink(b)
	if len(table) < 2 {
		b.parent, b.pgen, b.ns = none, 0, p.ns.acquire(ns)
		return
	}
	par := table[len(table)-2]
	b.parent, b.pgen = int32(par), p.blocks[par].gen
	b.ns = p.ns.hold(p.blocks[par].ns)
}

// unlink drops b's links: its namespace, if it starts a chain.
func (p *Pool) unlink(b *block) {
	p.ns.release(b.ns)
	b.parent, b.pgen, b.ns = none, 0, 0
}

// relink, as the last block of table is committed, points it at the block
// before it in table, or at the committed block that holds the same previous
// block when the sequence's own one is a duplicate that was never published
// (two sequences computed one prefix at once): later lookups, which walk
// committed blocks, then find it.
func (p *Pool) relink(table []BlockID) {
	if len(table) < 2 {
		return // a chain's first block: no parent, its namespace set by fill
	}
	par := table[len(table)-2]
	if pb := &p.blocks[par]; !pb.cached && len(pb.tokens) == p.cfg.BlockSize {
		if x, ok := p.equivalent(par); ok {
			par = x
		}
	}
	id := table[len(table)-1]
	b := &p.blocks[id]
	if b.parent == int32(par) && b.pgen == p.blocks[par].gen {
		return
	}
	if b.cached {
		// Made findable before its commit (a load, Recache): it is
		// published again under its new link, unless that makes it a
		// duplicate of a cached block.
		p.Uncache(id)
	}
	b.parent, b.pgen = int32(par), p.blocks[par].gen
}

// publish makes a filled block findable by its hash and reports whether it did.
// A duplicate of a cached block (its equivalent: same tokens after the same
// prefix) stays unfindable; a block that only shares its hash with cached
// ones (a 64-bit collision, or a block left unreachable when its prefix was
// uncached) gets an entry of its own, so neither a forged chain committed
// first nor an orphan keeps it out. The journal hears of a hash when its
// first block is published and of its going when its last one goes.
func (p *Pool) publish(id BlockID, ns string) bool {
	b := &p.blocks[id]
	if b.cached || len(b.tokens) != p.cfg.BlockSize {
		return false
	}
	// At most maxHolders blocks hold one hash, so that no walk of a probe
	// run grows with what one tenant commits (forged collisions): a full
	// set gives up a free holder to the new block, or keeps it out while
	// every holder is in use.
	held, spare := 0, BlockID(none)
	for x := range p.byHash.all(b.hash) {
		if p.same(x, id) {
			return false // a duplicate
		}
		held++
		if p.blocks[x].ref == 0 && spare == none {
			spare = x
		}
	}
	if held >= maxHolders {
		if spare == none {
			return false
		}
		p.Uncache(spare)
		held--
	}
	p.byHash.add(b.hash, id)
	b.cached = true
	if held == 0 {
		p.journalStored(b, ns)
	}
	if b.state == stateFree {
		p.freeCache++
		p.free.remove(p.blocks, int32(id))
		p.free.pushTail(p.blocks, int32(id))
	}
	return true
}

// maxHolders bounds the cached blocks that hold one hash.
const maxHolders = 4

// equivalent returns a cached block, other than id, that holds what id holds:
// its hash and tokens, after the same block (of the same generation) or, for a
// chain's first block, in the same namespace.
func (p *Pool) equivalent(id BlockID) (BlockID, bool) {
	for x := range p.byHash.all(p.blocks[id].hash) {
		if p.same(x, id) {
			return x, true
		}
	}
	return 0, false
}

// same says whether block x, other than id, holds what id holds (given the
// same hash): its tokens, after the same block of the same generation or,
// first, in the same namespace.
func (p *Pool) same(x, id BlockID) bool {
	xb, b := &p.blocks[x], &p.blocks[id]
	return x != id && xb.parent == b.parent && xb.ns == b.ns && (xb.parent == none || xb.pgen == b.pgen) && slices.Equal(xb.tokens, b.tokens)
}

// chainNS returns the namespace key of block id's chain, from the block that
// starts it ("" if a link on the way was reused). It walks the chain: for
// the few blocks made findable outside a commit (Recache).
func (p *Pool) chainNS(id BlockID) string {
	start, ns := id, ""
	for {
		if m := &p.nsMemo; m.set && m.id == id && m.gen == p.blocks[id].gen {
			ns = m.ns // a load publishes a chain in order: one step each
			break
		}
		b := &p.blocks[id]
		if b.parent == none {
			if b.ns != 0 {
				ns = p.ns.keys[b.ns]
			}
			break
		}
		if p.blocks[b.parent].gen != b.pgen {
			return ""
		}
		id = BlockID(b.parent)
	}
	p.nsMemo = nsMemo{set: true, id: start, gen: p.blocks[start].gen, ns: ns}
	return ns
}

// nsMemo is the last block chainNS found the namespace of.
type nsMemo struct {
	set bool
	id  BlockID
	gen uint32
	ns  string
}

// setTokens copies a full block's tokens into block id's place in the slab.
func (p *Pool) setTokens(id BlockID, tokens []int64) {
	b := &p.blocks[id]
	if cap(b.tokens) == 0 {
		b.tokens = p.slab.block(id)
	}
	b.tokens = append(b.tokens[:0], tokens...)
}
