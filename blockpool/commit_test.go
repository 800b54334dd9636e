package blockpool

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestAbortedBlocksAreNeverHits: a sequence freed before its prefill ran (an
// abort) leaves nothing findable; the next identical prompt computes from 0.
func TestAbortedBlocksAreNeverHits(t *testing.T) {
	p := newPool(t, 8, 4)
	prompt := seq(12, 1)
	if _, err := p.Allocate(1, prompt, ""); err != nil {
		t.Fatal(err)
	}
	if err := p.Deallocate(1); err != nil {
		t.Fatal(err)
	}
	if st := p.Stats(); st.Cached != 0 || st.FreeCached != 0 {
		t.Fatalf("aborted blocks cached: %+v", st)
	}
	b, err := p.Allocate(2, prompt, "")
	if err != nil {
		t.Fatal(err)
	}
	if b.CachedTokens != 0 {
		t.Fatalf("identical prompt after an abort got %d cached tokens of uncomputed KV", b.CachedTokens)
	}
	check(t, p)
}

// TestSameStepSharesNothingUncommitted: two requests with one prefix in one
// step; the second is not told the first's uncomputed blocks are ready.
func TestSameStepSharesNothingUncommitted(t *testing.T) {
	p := newPool(t, 16, 4)
	prompt := seq(9, 1)
	a, _ := p.Allocate(1, prompt, "")
	b, err := p.Allocate(2, prompt, "")
	if err != nil {
		t.Fatal(err)
	}
	if b.CachedTokens != 0 || a.Blocks[0] == b.Blocks[0] {
		t.Fatalf("second request shares uncommitted blocks: %v %v cached %d", a.Blocks, b.Blocks, b.CachedTokens)
	}
	// Both commit: the first published block wins, the duplicate stays private.
	if got, _ := p.Commit(1, 9, nil); !slices.Equal(got, a.Blocks[:2]) {
		t.Fatalf("commit 1 published %v", got)
	}
	if got, _ := p.Commit(2, 9, nil); len(got) != 0 {
		t.Fatalf("duplicate commit published %v", got)
	}
	c, _ := p.Allocate(3, prompt, "")
	if c.CachedTokens != 8 || !slices.Equal(c.Blocks[:2], a.Blocks[:2]) {
		t.Fatalf("after commit: %v cached %d", c.Blocks, c.CachedTokens)
	}
	check(t, p)
}

// TestPartialCommit: a chunked prefill commits chunk by chunk; only fully
// computed blocks become findable.
func TestPartialCommit(t *testing.T) {
	p := newPool(t, 16, 4)
	prompt := seq(12, 1)
	a, _ := p.Allocate(1, prompt, "")
	got, err := p.Commit(1, 6, nil)
	if err != nil || !slices.Equal(got, a.Blocks[:1]) {
		t.Fatalf("commit 6 published %v, %v", got, err)
	}
	if n, _ := p.Committed(1); n != 6 {
		t.Fatalf("committed %d", n)
	}
	b, _ := p.Allocate(2, prompt, "")
	if b.CachedTokens != 4 {
		t.Fatalf("cached %d after committing one block", b.CachedTokens)
	}
	// Lower commits change nothing; too many tokens is an error that changes nothing.
	if got, err := p.Commit(1, 2, nil); err != nil || len(got) != 0 {
		t.Fatalf("lower commit: %v %v", got, err)
	}
	if _, err := p.Commit(1, 13, nil); !errors.Is(err, ErrBadCommit) {
		t.Fatalf("commit past the end: %v", err)
	}
	if n, _ := p.Committed(1); n != 6 {
		t.Fatalf("failed commit changed the count: %d", n)
	}
	// A negative count other than AllTokens says so, not "past the end".
	_, err = p.Commit(1, -2, nil)
	if !errors.Is(err, ErrBadCommit) || !strings.Contains(err.Error(), "negative token count") || strings.Contains(err.Error(), "past") {
		t.Fatalf("commit of -2: %v", err)
	}
	if n, _ := p.Committed(1); n != 6 {
		t.Fatalf("failed commit changed the count: %d", n)
	}
	if _, err := p.Commit(9, 1, nil); !errors.Is(err, ErrUnknownSequence) {
		t.Fatalf("commit of unknown seq: %v", err)
	}
	check(t, p)
}

// TestCollisionAfterAnotherPrefixIsNoHit: a committed block whose 64-bit hash
// and tokens match the prompt's but that follows another prefix is no hit —
// the shape of a forged xxh64 collision. The prompt's first block hits; the
// second is a candidate by hash alone.
func TestCollisionAfterAnotherPrefixIsNoHit(t *testing.T) {
	p := newPool(t, 8, 2)
	if _, err := allocCommit(p, 1, []int64{1, 2}, ""); err != nil {
		t.Fatal(err)
	}
	x, err := allocCommit(p, 2, []int64{5, 6, 3, 4}, "")
	if err != nil {
		t.Fatal(err)
	}
	// Forge: x's second block now answers to the hash the prompt's second
	// block has.
	want := ComputeKeys("", []int64{1, 2, 3, 4}, 2, false).Hashes[1]
	forged := x.Blocks[1]
	p.byHash.remove(p.blocks[forged].hash, forged)
	p.blocks[forged].hash = want
	p.byHash.add(want, forged)
	r, err := p.Allocate(3, []int64{1, 2, 3, 4}, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.HitBlocks != 1 || r.Blocks[1] == forged {
		t.Fatalf("%d hit blocks (table %v, forged %d), want 1: a block of another prefix was served", r.HitBlocks, r.Blocks, forged)
	}
	// The same forged block is still a hit for its own prefix.
	if _, err := p.Lookup(want); !err {
		t.Fatal("forged block unfindable")
	}
}

// TestNamespaceIsExact: a chain's first block is a hit only in its own
// namespace, whatever the hash says.
func TestNamespaceIsExact(t *testing.T) {
	p := newPool(t, 8, 2)
	a, err := allocCommit(p, 1, []int64{1, 2}, "tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	// Forge: the block answers to the hash of the unsalted chain.
	want := ComputeKeys("", []int64{1, 2}, 2, false).Hashes[0]
	id := a.Blocks[0]
	p.byHash.remove(p.blocks[id].hash, id)
	p.blocks[id].hash = want
	p.byHash.add(want, id)
	r, err := p.Allocate(2, []int64{1, 2}, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.HitBlocks != 0 {
		t.Fatal("a block of another namespace was served")
	}
}

// TestDuplicateCommitsStillChain: two sequences compute one prefix at once;
// the second commits its first block first, so the first sequence's own
// first block is a duplicate that is never published. Its second block must
// still be found after the published first block.
func TestDuplicateCommitsStillChain(t *testing.T) {
	p := newPool(t, 16, 2)
	prompt := []int64{1, 2, 3, 4, 5, 6}
	if _, err := p.Allocate(1, prompt, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Allocate(2, prompt, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Commit(2, 2, nil); err != nil { // seq 2 publishes block 0
		t.Fatal(err)
	}
	if _, err := p.Commit(1, 6, nil); err != nil { // seq 1 publishes blocks 1 and 2
		t.Fatal(err)
	}
	r, err := p.Allocate(3, prompt, "")
	if err != nil {
		t.Fatal(err)
	}
	if r.HitBlocks != 3 {
		t.Fatalf("%d hit blocks, want 3", r.HitBlocks)
	}
	check(t, p)
}

func TestLookaheadAndNewBlocks(t *testing.T) {
	p := newPool(t, 16, 4)
	a, err := p.AllocateRequest(Request{Seq: 1, Tokens: seq(5, 1), Lookahead: 6})
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Blocks) != 3 { // 11 tokens of room
		t.Fatalf("table %v, want 3 blocks for 5+6 tokens", a.Blocks)
	}
	// Appends land in the lookahead slots: no new blocks until past them.
	got, err := p.AppendTokens(1, seq(6, 100), 0, nil)
	if err != nil || len(got) != 0 {
		t.Fatalf("append into lookahead took %v, %v", got, err)
	}
	got, err = p.AppendTokens(1, seq(2, 200), 4, nil) // 13 tokens + 4 ahead: 5 blocks
	if err != nil || len(got) != 2 {
		t.Fatalf("append took %v, %v; want 2 new blocks", got, err)
	}
	tbl, _ := p.Table(nil, 1)
	if !slices.Equal(tbl[3:], got) {
		t.Fatalf("new blocks %v are not the table's tail %v", got, tbl)
	}
	if _, err := p.AppendTokens(1, nil, -1, nil); !errors.Is(err, ErrBadArgument) {
		t.Fatalf("negative lookahead: %v", err)
	}
	if _, err := p.AppendTokens(1, nil, 100, nil); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("lookahead past the pool: %v", err)
	}
	if n, _ := p.NumTokens(1); n != 13 {
		t.Fatalf("tokens %d", n)
	}
	check(t, p)
	if err := p.Deallocate(1); err != nil || p.NumFree() != 16 {
		t.Fatalf("free %d after deallocate: %v", p.NumFree(), err)
	}
}

func TestKeysMustMatchPrompt(t *testing.T) {
	p := newPool(t, 8, 4)
	k := ComputeKeys("ns", seq(8, 1), 4, false)
	if _, err := p.AllocateRequest(Request{Seq: 1, Tokens: seq(12, 1), NS: "ns", Keys: k}); !errors.Is(err, ErrBadArgument) {
		t.Fatalf("keys for another length: %v", err)
	}
	if _, err := p.AllocateRequest(Request{Seq: 1, Tokens: seq(8, 1), NS: "other", Keys: k}); !errors.Is(err, ErrBadArgument) {
		t.Fatalf("keys for another namespace: %v", err)
	}
	if p.Stats().Sequences != 0 {
		t.Fatal("a rejected request changed the pool")
	}
	if _, err := p.AllocateRequest(Request{Seq: 1, Tokens: seq(8, 1), NS: "ns", Keys: k}); err != nil {
		t.Fatal(err)
	}
}

// TestNamespacesAreForgotten: the pool remembers a namespace only while some
// block of it is held or cached, however many namespaces came by.
func TestNamespacesAreForgotten(t *testing.T) {
	p := newPool(t, 4, 2)
	for i := range 100 {
		salt := fmt.Sprintf("tenant-%d", i)
		if _, err := allocCommit(p, SeqID(i), []int64{1, 2}, salt); err != nil {
			t.Fatal(err)
		}
		if err := p.Deallocate(SeqID(i)); err != nil {
			t.Fatal(err)
		}
		check(t, p)
	}
	if n := p.ns.len(); n > 4 {
		t.Fatalf("%d namespaces interned for a 4-block pool", n)
	}
	// The latest tenant still hits.
	if r, err := p.Allocate(1000, []int64{1, 2}, "tenant-99"); err != nil || r.HitBlocks != 1 {
		t.Fatalf("latest tenant: %+v %v", r, err)
	}
}

// TestJournalNamesNamespace: a Stored entry names its chain's namespace
// key, for a committed block and for one made findable again by Recache
// (found from the chain's first block), so the event stream can name a
// LoRA adapter.
func TestJournalNamesNamespace(t *testing.T) {
	p, err := New(Config{NumBlocks: 8, BlockSize: 2, Journal: true})
	if err != nil {
		t.Fatal(err)
	}
	const ns = "tenant-ns"
	if _, err := p.Allocate(1, []int64{1, 2, 3, 4}, ns); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Commit(1, AllTokens, nil); err != nil {
		t.Fatal(err)
	}
	j := p.DrainJournal()
	if len(j) != 2 || j[0].NS != ns || j[1].NS != ns {
		t.Fatalf("journal %+v, want two stores in %q", j, ns)
	}
	tbl, _ := p.Table(nil, 1)
	p.Uncache(tbl[1])
	p.Recache(tbl[1])
	j = p.DrainJournal()
	if len(j) != 2 || j[1].Stored != true || j[1].NS != ns {
		t.Fatalf("journal after Uncache and Recache %+v, want a removal, then a store in %q", j, ns)
	}
}

// TestHoldersListsEveryBlockOfAHash: Holders names every cached block
// holding a hash — here a chain's block and a forged one answering to the
// same hash after another prefix — and Lookup one of them.
func TestHoldersListsEveryBlockOfAHash(t *testing.T) {
	p, h, own, forged := forgedHolder(t)
	got := slices.Sorted(slices.Values(p.Holders(nil, h)))
	if want := slices.Sorted(slices.Values([]BlockID{own, forged})); !slices.Equal(got, want) {
		t.Fatalf("Holders = %v, want %v", got, want)
	}
	if id, ok := p.Lookup(h); !ok || !slices.Contains(got, id) {
		t.Fatalf("Lookup = %d, %t; want one of %v", id, ok, got)
	}
}

// TestCachedChangesAsTheJournalSaidThem: CachedChanges lists each findable
// block once, as its journal entry said it (parent, tokens, namespace),
// with tokens the caller owns: a block reused afterwards does not change
// them.
func TestCachedChangesAsTheJournalSaidThem(t *testing.T) {
	p, err := New(Config{NumBlocks: 4, BlockSize: 2, Journal: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.Allocate(1, []int64{1, 2, 3, 4}, "tenant-ns"); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Commit(1, AllTokens, nil); err != nil {
		t.Fatal(err)
	}
	if err := p.Deallocate(1); err != nil {
		t.Fatal(err)
	}
	said := p.DrainJournal()
	got := p.CachedChanges(nil)
	if !reflect.DeepEqual(got, said) {
		t.Fatalf("CachedChanges %+v, the journal said %+v", got, said)
	}
	// Another sequence takes every block: the changes keep their tokens.
	if _, err := p.Allocate(2, []int64{9, 9, 9, 9, 9, 9, 9, 9}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Commit(2, AllTokens, nil); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got[0].Tokens, []int64{1, 2}) || !slices.Equal(got[1].Tokens, []int64{3, 4}) {
		t.Fatalf("tokens changed with the blocks' reuse: %+v", got)
	}
}
