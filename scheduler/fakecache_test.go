package scheduler

import (
	"container/list"
	"context"
	"errors"
	"fmt"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/prefixhash"
)

// fakeCache is an in-memory, deterministic Cache for tests. The GPU tier is a
// real blockpool.Pool; blocks it evicts go to an LRU "pinned" set, whose own
// evictions go to an LRU "disk" set. Loads complete either at once or after a
// number of later calls, so the clock never matters to it.
type fakeCache struct {
	pool   *blockpool.Pool
	bs     int
	hasher prefixhash.Hasher
	pinned *lruSet
	disk   *lruSet

	readyAfter  int  // Ready closes after this many later calls (0: closed on return)
	lost        int  // tokens each load reports missing (Loaded = total - lost)
	noSwap      bool // Swap answers ErrUnsupported
	onAllocate  func([]AllocReq)
	calls       int
	held        []heldLoad
	evicted     []blockpool.Evicted
	scratch     []prefixhash.Hash
	allocCalls  int
	appendCalls int
	freed       map[SeqID]int
	swapped     []SeqID
}

type heldLoad struct {
	ch chan struct{}
	at int
}

type fakeConfig struct {
	gpuBlocks, pinnedBlocks, diskBlocks int
	blockSize                           int
}

func newFakeCache(c fakeConfig) *fakeCache {
	p, err := blockpool.New(blockpool.Config{NumBlocks: c.gpuBlocks, BlockSize: c.blockSize})
	if err != nil {
		panic(err)
	}
	return &fakeCache{
		pool: p, bs: c.blockSize,
		pinned: newLRUSet(c.pinnedBlocks), disk: newLRUSet(c.diskBlocks),
		freed: make(map[SeqID]int),
	}
}

// preload puts the full blocks of tokens into the pinned or disk tier.
func (f *fakeCache) preload(tier Tier, tokens []int64, salt string) {
	for _, h := range f.hasher.Chain(nil, salt, tokens, f.bs) {
		switch tier {
		case TierPinned:
			f.pinned.add(h)
		case TierDisk:
			f.disk.add(h)
		}
	}
}

func (f *fakeCache) tick() {
	f.calls++
	kept := f.held[:0]
	for _, h := range f.held {
		if h.at <= f.calls {
			close(h.ch)
			continue
		}
		kept = append(kept, h)
	}
	f.held = kept
}

// spill moves blocks the pool evicted down to the pinned tier, and what that
// evicts down to disk.
func (f *fakeCache) spill() {
	f.evicted = f.pool.DrainEvicted(f.evicted[:0])
	for _, e := range f.evicted {
		if out, ok := f.pinned.add(e.Hash); ok {
			f.disk.add(out)
		}
	}
}

func (f *fakeCache) Allocate(ctx context.Context, reqs []AllocReq) ([]AllocOutcome, error) {
	f.tick()
	f.allocCalls++
	if f.onAllocate != nil {
		f.onAllocate(reqs)
	}
	outs := make([]AllocOutcome, len(reqs))
	for i, r := range reqs {
		f.scratch = f.hasher.Chain(f.scratch[:0], r.Salt, r.Tokens, f.bs)
		a, err := f.pool.Allocate(blockpool.SeqID(r.Seq), r.Tokens, r.Salt)
		if errors.Is(err, blockpool.ErrNoSpace) {
			outs[i].Err = fmt.Errorf("fake: %w: %w", ErrNoBlocks, err)
			continue
		}
		if err != nil {
			return nil, err
		}
		b := a.HitBlocks
		pinned, disk := 0, 0
		for ; b < len(f.scratch) && f.pinned.has(f.scratch[b]); b++ {
			pinned += f.bs
		}
		for ; b < len(f.scratch) && f.disk.has(f.scratch[b]); b++ {
			disk += f.bs
		}
		o := AllocOutcome{GPUTokens: a.CachedTokens, PinnedTokens: pinned, DiskTokens: disk}
		if total := pinned + disk; total > 0 {
			ch := make(chan struct{})
			if f.readyAfter > 0 {
				f.held = append(f.held, heldLoad{ch, f.calls + f.readyAfter})
			} else {
				close(ch)
			}
			lost := f.lost
			o.Ready, o.Loaded = ch, func() int { return max(total-lost, 0) }
		}
		outs[i] = o
		f.spill()
	}
	return outs, nil
}

func (f *fakeCache) Append(ctx context.Context, seqs []SeqID, tokens []int64) ([]error, error) {
	f.tick()
	f.appendCalls++
	errs := make([]error, len(seqs))
	for i, s := range seqs {
		err := f.pool.MayAppend(blockpool.SeqID(s), tokens[i])
		switch {
		case errors.Is(err, blockpool.ErrNoSpace):
			errs[i] = fmt.Errorf("fake: %w: %w", ErrNoBlocks, err)
		case err != nil:
			return nil, err
		}
		f.spill()
	}
	return errs, nil
}

func (f *fakeCache) Free(ctx context.Context, seqs []SeqID) error {
	f.tick()
	for _, s := range seqs {
		if err := f.pool.Deallocate(blockpool.SeqID(s)); err != nil {
			return err
		}
		f.freed[s]++
	}
	return nil
}

func (f *fakeCache) Swap(ctx context.Context, seqs []SeqID) error {
	if f.noSwap {
		return fmt.Errorf("fake: %w", ErrUnsupported)
	}
	f.tick()
	for _, s := range seqs {
		table, err := f.pool.Table(nil, blockpool.SeqID(s))
		if err != nil {
			return err
		}
		for _, id := range table {
			if h, ok := f.pool.BlockHash(id); ok {
				if out, ok := f.pinned.add(h); ok {
					f.disk.add(out)
				}
			}
		}
		if err := f.pool.Deallocate(blockpool.SeqID(s)); err != nil {
			return err
		}
		f.swapped = append(f.swapped, s)
	}
	return nil
}

func (f *fakeCache) Flush(ctx context.Context) error { return nil }

func (f *fakeCache) Commit(ctx context.Context, seqs []SeqID, computed []int) ([]error, error) {
	errs := make([]error, len(seqs))
	for i, s := range seqs {
		_, errs[i] = f.pool.Commit(blockpool.SeqID(s), computed[i], nil)
	}
	return errs, nil
}

// lruSet is a set of block hashes with a capacity and LRU eviction.
type lruSet struct {
	cap   int
	order *list.List
	m     map[prefixhash.Hash]*list.Element
}

func newLRUSet(capacity int) *lruSet {
	return &lruSet{cap: capacity, order: list.New(), m: make(map[prefixhash.Hash]*list.Element)}
}

func (s *lruSet) has(h prefixhash.Hash) bool {
	e, ok := s.m[h]
	if ok {
		s.order.MoveToBack(e)
	}
	return ok
}

// add inserts h (or refreshes it) and returns the hash it evicted, if any.
func (s *lruSet) add(h prefixhash.Hash) (prefixhash.Hash, bool) {
	if s.cap <= 0 {
		return h, true // a tier of size 0 passes everything down
	}
	if e, ok := s.m[h]; ok {
		s.order.MoveToBack(e)
		return 0, false
	}
	s.m[h] = s.order.PushBack(h)
	if s.order.Len() <= s.cap {
		return 0, false
	}
	front := s.order.Front()
	s.order.Remove(front)
	out := front.Value.(prefixhash.Hash)
	delete(s.m, out)
	return out, true
}
