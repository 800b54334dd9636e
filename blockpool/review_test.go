package blockpool

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvtier/kvtier/internal/xxforge"
	"github.com/kvtier/kvtier/prefixhash"
)

// runOwnerOps extends runOps with the owner's block calls: Pin/Unpin (copies),
// Uncache, Recache (a verified load: only of a prefix some sequence
// committed), Detach, AppendTokens with lookahead, MaxHits. After every step
// it checks the invariants, that only committed prefixes are findable, that
// a pinned block is never reused (its generation does not change), and that
// every hit holds the digest of the prompt's own prefix.
func runOwnerOps(t *testing.T, data []byte, blocks, size int) {
	p, err := New(Config{NumBlocks: blocks, BlockSize: size, Digests: true, Journal: true})
	if err != nil {
		t.Fatal(err)
	}
	type mseq struct {
		tokens []int64
		salt   string
	}
	seqs := map[SeqID]*mseq{}
	done := map[prefixhash.Digest]bool{}
	pins := map[BlockID]int{}
	pinGen := map[BlockID]uint32{}
	salts := []string{"", "t1"}
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	for len(data) > 0 {
		op, arg := next(), next()
		id := SeqID(arg % 6)
		switch op % 11 {
		case 0, 1: // allocate
			stem := int(next()%4) * size
			n := max(1, stem+int(next()%5))
			toks := make([]int64, n)
			for i := range toks {
				if i < stem {
					toks[i] = int64(i % 3)
				} else {
					toks[i] = int64(arg%5)*100 + int64(i)
				}
			}
			salt := salts[int(arg>>4)%len(salts)]
			mh := int(next()%4) - 1
			la := int(next() % 3)
			a, err := p.AllocateRequest(Request{Seq: id, Tokens: toks, NS: salt, MaxHits: mh, Lookahead: la})
			if err != nil {
				break
			}
			seqs[id] = &mseq{tokens: toks, salt: salt}
			k := ComputeKeys(salt, toks, size, true)
			for i := range a.HitBlocks {
				b := a.Blocks[i]
				if p.digests[b] != k.Digests[i] || !done[k.Digests[i]] {
					t.Fatalf("hit %d (block %d) holds another prefix's digest, or one never committed", i, b)
				}
			}
		case 2: // append with lookahead
			ms, live := seqs[id]
			toks := []int64{int64(arg % 7)}
			if next()%2 == 0 {
				toks = append(toks, int64(arg%3))
			}
			if _, err := p.AppendTokens(id, toks, int(next()%3), nil); err == nil {
				if !live {
					t.Fatal("append to a dead sequence")
				}
				ms.tokens = append(ms.tokens, toks...)
			}
		case 3: // deallocate
			if err := p.Deallocate(id); err == nil {
				delete(seqs, id)
			}
		case 4: // commit
			ms, live := seqs[id]
			if !live {
				break
			}
			n := int(next()) % (len(ms.tokens) + 1)
			if _, err := p.Commit(id, n, nil); err != nil {
				t.Fatal(err)
			}
			c, _ := p.Committed(id)
			for _, d := range ComputeKeys(ms.salt, ms.tokens[:c], size, true).Digests {
				done[d] = true
			}
		case 5: // pin a block not reserved
			b := BlockID(int(next()) % blocks)
			if p.blocks[b].state == stateReserved {
				break
			}
			p.Pin(b)
			pins[b]++
			pinGen[b] = p.blocks[b].gen
		case 6: // unpin
			for b := range pins {
				p.Unpin(b)
				if pins[b]--; pins[b] == 0 {
					delete(pins, b)
				}
				break
			}
		case 7: // uncache
			p.Uncache(BlockID(int(next()) % blocks))
		case 8: // recache: a load verified against the block's digest
			b := BlockID(int(next()) % blocks)
			if d, ok := p.BlockDigest(b); ok && done[d] && p.blocks[b].state != stateFree {
				p.Recache(b)
			}
		case 9: // detach a pinned block of a sequence
			ms, live := seqs[id]
			if !live {
				break
			}
			tbl, _ := p.Table(nil, id)
			idx := int(next()) % len(tbl)
			c, _ := p.Committed(id)
			if pins[tbl[idx]] == 0 || idx < c/size {
				break
			}
			_, _ = p.Detach(id, idx)
			_ = ms
		case 10: // reserve / release
			if next()%2 == 0 {
				_ = p.Reserve(id, int(next()%3)+1)
			} else {
				_ = p.Release(id)
			}
		}
		if err := p.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		for b, g := range pinGen {
			if pins[b] == 0 {
				delete(pinGen, b)
				continue
			}
			if p.blocks[b].gen != g {
				t.Fatalf("block %d reused while pinned", b)
			}
		}
		for i := range p.blocks {
			if p.blocks[i].cached && !done[p.digests[i]] {
				t.Fatalf("block %d is findable but no sequence committed its prefix", i)
			}
		}
		var h prefixhash.Hasher
		for sid, ms := range seqs {
			tbl, _ := p.Table(nil, sid)
			k := ComputeKeys(ms.salt, ms.tokens, size, true)
			for i, want := range h.Chain(nil, ms.salt, ms.tokens, size) {
				b := &p.blocks[tbl[i]]
				if b.hash != want || p.digests[tbl[i]] != k.Digests[i] || !slices.Equal(b.tokens, ms.tokens[i*size:(i+1)*size]) {
					t.Fatalf("seq %d block %d (id %d) holds other contents", sid, i, tbl[i])
				}
			}
		}
	}
}

func TestModelOwnerCalls(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for range 800 {
		data := make([]byte, 400)
		for i := range data {
			data[i] = byte(r.IntN(256))
		}
		runOwnerOps(t, data, 16, 2)
		runOwnerOps(t, data, 6, 1)
		runOwnerOps(t, data, 10, 3)
	}
}

func FuzzPoolOwnerCalls(f *testing.F) {
	f.Add([]byte{0, 1, 2, 5, 4, 2, 9, 5, 1, 1, 2, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		runOwnerOps(t, data, 16, 2)
		runOwnerOps(t, data, 6, 1)
	})
}

// TestUncachedPrefixOrphanGivesWay: deleting a prompt (the GPU tier's
// deleteChain: Uncache of every block of CachedChain) that is the prefix of
// a longer cached chain leaves the longer chain's later blocks cached but
// unreachable (their parent is no longer findable). When the whole prompt
// is computed and committed again, its later blocks are findable beside
// those orphans, and the prompt hits every block. (publish used to refuse them as
// duplicates: the recomputed prompt hit only its first block until the
// orphans happened to be evicted; review of 2026-11-27.)
func TestUncachedPrefixOrphanGivesWay(t *testing.T) {
	p := newPool(t, 16, 2)
	prompt := seq(4, 10) // blocks A, B
	if _, err := allocCommit(p, 1, prompt, ""); err != nil {
		t.Fatal(err)
	}
	if err := p.Deallocate(1); err != nil {
		t.Fatal(err)
	}
	// Delete the one-block prefix, as deleteChain does.
	short := prompt[:2]
	ids, err := p.CachedChain(nil, short, ComputeKeys("", short, 2, false))
	if err != nil || len(ids) != 1 {
		t.Fatalf("chain %v, %v", ids, err)
	}
	for _, id := range ids {
		p.Uncache(id)
	}
	// The engine computes the whole prompt again and commits it.
	if _, err := allocCommit(p, 2, prompt, ""); err != nil {
		t.Fatal(err)
	}
	check(t, p)
	r, err := p.Allocate(3, prompt, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.HitBlocks != 2 {
		t.Fatalf("the recomputed, committed prompt (held by sequence 2) hits %d of 2 blocks: the deleted prefix's orphaned child keeps its hash", r.HitBlocks)
	}
}

// TestHugeBlockSizeRefused: New refuses, with ErrBadConfig, a BlockSize
// whose pool's tokens overflow an int. It used to take it (review of
// 2026-11-27), and the pool's token arithmetic wrapped: with BlockSize
// MaxInt an Allocate of two tokens got a table of no blocks; with four
// blocks of MaxInt/2 tokens every Allocate was a NoSpaceError.
func TestHugeBlockSizeRefused(t *testing.T) {
	for _, cfg := range []Config{{NumBlocks: 1, BlockSize: math.MaxInt}, {NumBlocks: 4, BlockSize: math.MaxInt / 2}} {
		p, err := New(cfg)
		if errors.Is(err, ErrBadConfig) {
			continue
		}
		if err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
		a, err := p.Allocate(1, []int64{1, 2}, "")
		if err != nil || len(a.Blocks) != 1 {
			t.Errorf("%+v accepted; Allocate of 2 tokens: blocks %v, err %v (want one block, or ErrBadConfig from New)", cfg, a.Blocks, err)
		}
	}
}

// forgeChain returns a prompt, different from victim in every block, whose
// chained xxh64 hashes in namespace ns equal victim's.
func forgeChain(t *testing.T, ns string, victim []int64, bs int) []int64 {
	t.Helper()
	var h prefixhash.Hasher
	want := h.Chain(nil, ns, victim, bs)
	prev, hasPrev := prefixhash.Seed(ns)
	r := rand.New(rand.NewPCG(7, 8))
	var forged []int64
	for i := range want {
		vb := victim[i*bs : (i+1)*bs]
		attacker := make([]int64, bs)
		for j := range attacker {
			attacker[j] = r.Int64N(1 << 20)
		}
		var fb []int64
		var err error
		if xxforge.Solvable(hasPrev, bs) {
			fb, err = xxforge.ForgeBlock(prev, hasPrev, attacker, want[i])
		} else {
			fb, err = xxforge.Collide(prev, hasPrev, vb, attacker)
		}
		if err != nil {
			t.Fatalf("forging block %d: %v", i, err)
		}
		forged = append(forged, fb...)
		prev, hasPrev = want[i], true
	}
	if got := h.Chain(nil, ns, forged, bs); !slices.Equal(got, want) {
		t.Fatal("the forged chain does not collide")
	}
	return forged
}

// TestForgedSquatterDoesNotDenyVictimCache: a tenant that commits first a
// forged chain whose 64-bit hashes equal a victim prompt's (same namespace,
// no VocabSize) does not keep the victim's prompt out of the cache: each
// block holding a hash has its own entry, and the victim, having committed
// its prompt, hits it on the next allocation (and is never served the
// forged blocks). The pool used to keep one block per hash, the first
// published (review of 2026-11-27): the victim's prompt never hit.
func TestForgedSquatterDoesNotDenyVictimCache(t *testing.T) {
	const bs = 16
	p := newPool(t, 32, bs)
	victim := seq(3*bs, 1000)
	forged := forgeChain(t, "", victim, bs)
	if _, err := allocCommit(p, 1, forged, ""); err != nil { // the squatter first
		t.Fatal(err)
	}
	if _, err := allocCommit(p, 2, victim, ""); err != nil { // the victim computes and commits
		t.Fatal(err)
	}
	check(t, p)
	r, err := p.Allocate(3, victim, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.HitBlocks != 3 {
		t.Fatalf("the victim's committed prompt (held by sequence 2) hits %d of 3 blocks: a forged squatter holding its hashes keeps it out of the cache", r.HitBlocks)
	}
}
