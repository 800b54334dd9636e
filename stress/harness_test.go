package stress

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/prefixhash"
)

const (
	bt       = 4  // tokens per block
	numStems = 16 // shared prompt stems, identical across tenants
	stemBlks = 3  // blocks per stem
	maxLive  = 2  // live sequences per goroutine
)

// envInt reads a positive integer knob from the environment.
func envInt(t testing.TB, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

func salt(tenant int) string { return "tenant-" + strconv.Itoa(tenant) }

// stem returns shared stem i: the same tokens for every tenant, and no stem is
// a prefix of another.
func stem(i int) []int64 {
	out := make([]int64, stemBlks*bt)
	for j := range out {
		out[j] = int64(1000*(i+1) + j)
	}
	return out
}

// pattern is the content of the block with hash h for tenant: any block read
// back must equal it byte for byte.
func pattern(buf []byte, h prefixhash.Hash, tenant int) []byte {
	x := uint64(h)*0x9e3779b97f4a7c15 ^ uint64(tenant+1)<<56
	for i := 0; i+8 <= len(buf); i += 8 {
		x ^= x >> 33
		x *= 0xff51afd7ed558ccd
		x ^= x >> 29
		binary.LittleEndian.PutUint64(buf[i:], x+uint64(i))
	}
	return buf
}

// writers counts, per block hash, goroutines between raising it before their
// Allocate and having written what they compute. See the package doc.
type writers struct{ m sync.Map }

func (w *writers) ctr(h prefixhash.Hash) *atomic.Int32 {
	v, ok := w.m.Load(h)
	if !ok {
		v, _ = w.m.LoadOrStore(h, new(atomic.Int32))
	}
	return v.(*atomic.Int32)
}

// counts are figures summed over goroutines once they are done.
type counts struct {
	ops, allocs, noSpace, appends, frees, exists, deletes, prefetches int
	allocBlocks                                                       int // blocks of successful allocations
	hitBlocks, onboarded, late, failed                                int
	verified, verifiedHit, verifiedOnboard, skippedBusy               int
	written                                                           int
	// Commits tried before Ready (earlyCommits): refused with ErrNotReady,
	// and accepted (the loads had ended by then, or there were none).
	refused, early int
	// Commits whose KV was written after the commit, behind a fence.
	lateWrites int
	// Frees preceded by a finishing commit with a class (CommitItem.Class).
	classed int
}

func (c *counts) add(o *counts) {
	c.ops += o.ops
	c.allocs += o.allocs
	c.noSpace += o.noSpace
	c.appends += o.appends
	c.frees += o.frees
	c.exists += o.exists
	c.deletes += o.deletes
	c.prefetches += o.prefetches
	c.allocBlocks += o.allocBlocks
	c.hitBlocks += o.hitBlocks
	c.onboarded += o.onboarded
	c.late += o.late
	c.failed += o.failed
	c.verified += o.verified
	c.verifiedHit += o.verifiedHit
	c.verifiedOnboard += o.verifiedOnboard
	c.skippedBusy += o.skippedBusy
	c.written += o.written
	c.refused += o.refused
	c.early += o.early
	c.lateWrites += o.lateWrites
	c.classed += o.classed
}

// live is a sequence a worker owns.
type live struct {
	seq    uint64
	tokens []int64
}

// worker is one goroutine's state: its tenant, its sequences (seq ids g<<32+n)
// and its figures. Only its goroutine touches it.
type worker struct {
	g, tenant int
	m         *kvtier.Manager
	w         *writers
	rng       *rand.Rand
	hasher    prefixhash.Hasher
	next      uint64
	live      []live
	c         counts
	buf, want []byte
	// closing: errors.Is(err, kvtier.ErrClosed) ends the worker without failing.
	closing bool
	// noDeletes skips the Delete operations (a phase that checks how blocks
	// move down, which a Delete racing a write down does not follow).
	noDeletes bool
	// closed, when set, is closed once Close has returned: a Ready still
	// pending then is abandoned (counted) rather than waited for.
	closed    <-chan struct{}
	abandoned int
	// pick, when set, picks the prompt stems (forged ones among them)
	// instead of the shared stems.
	pick func(k *worker) []int64
	// lastGPU is the GPU hit of the worker's last allocation, in tokens.
	lastGPU int
	// dev, when set, is the Manager's device, and the worker acts as an
	// engine that enqueues its work: with earlyCommits it sometimes
	// commits before Ready, with lateWrites it sometimes commits before
	// its KV is written, naming a fence it signals once it is (see
	// allocate).
	dev                      gpu.Device
	earlyCommits, lateWrites bool
}

func newWorker(m *kvtier.Manager, w *writers, g, tenants int, seed uint64) *worker {
	n := m.Layout().BlockBytes()
	return &worker{
		g: g, tenant: g % tenants, m: m, w: w,
		rng: rand.New(rand.NewPCG(seed, uint64(g))),
		buf: make([]byte, n), want: make([]byte, n),
	}
}

var errStop = errors.New("stress: manager closed")

// check maps an error of a call to the worker's verdict: nil to go on, errStop
// when the manager closed under a worker that expects it, else the error.
func (k *worker) check(op string, err error) error {
	switch {
	case err == nil:
		return nil
	case k.closing && (errors.Is(err, kvtier.ErrClosed) || errors.Is(err, gpu.ErrClosed)):
		return errStop // the Manager, or the arena it freed at Close
	}
	return fmt.Errorf("goroutine %d: %s: %w", k.g, op, err)
}

// prompt is a shared stem plus, half the time, a tail unique to the sequence,
// and sometimes a partial last block.
func (k *worker) prompt(seq uint64) []int64 {
	p := k.stem()
	if k.rng.IntN(3) == 0 {
		n := k.rng.IntN(2*bt) + 1
		for i := range n {
			p = append(p, int64(1<<40)+int64(seq)*64+int64(i))
		}
	}
	return p
}

// stem returns one of the prompt stems at random: a shared stem, or what
// pick picks.
func (k *worker) stem() []int64 {
	if k.pick != nil {
		return k.pick(k)
	}
	return stem(k.rng.IntN(numStems))
}

// round runs ops random operations, then frees every sequence it still owns.
func (k *worker) round(ctx context.Context, ops int) error {
	for range ops {
		if err := k.step(ctx); err != nil {
			return err
		}
	}
	for len(k.live) > 0 {
		if err := k.free(ctx, 0); err != nil {
			return err
		}
	}
	return nil
}

func (k *worker) step(ctx context.Context) error {
	k.c.ops++
	switch r := k.rng.IntN(12); {
	case r < 4:
		if len(k.live) >= maxLive {
			return k.free(ctx, k.rng.IntN(len(k.live)))
		}
		k.next++
		seq := uint64(k.g)<<32 | k.next
		return k.allocate(ctx, seq, k.prompt(seq), false /* wantMiss */)
	case r < 6:
		if len(k.live) == 0 {
			return nil
		}
		return k.append(ctx, k.rng.IntN(len(k.live)))
	case r < 8:
		if len(k.live) == 0 {
			return nil
		}
		return k.free(ctx, k.rng.IntN(len(k.live)))
	case r < 10:
		k.c.exists++
		p := k.stem()
		pr, err := k.m.Exists(ctx, p, salt(k.tenant))
		if err := k.check("exists", err); err != nil {
			return err
		}
		if pr.Tokens.Of(kvtier.GPU)%bt != 0 || pr.Tokens.Of(kvtier.GPU) > len(p) || pr.Tokens.Of(kvtier.Pinned)%bt != 0 || pr.Tokens.Of(kvtier.Pinned) > len(p) {
			return fmt.Errorf("goroutine %d: exists: presence %+v of a %d-token stem", k.g, pr, len(p))
		}
	case r < 11:
		if k.noDeletes {
			return nil
		}
		k.c.deletes++
		_, err := k.m.Delete(ctx, k.stem(), salt(k.tenant))
		if errors.Is(err, kvtier.ErrNotDurable) {
			err = nil // an injected disk fault hit the scrub: reported, not lost data
		}
		return k.check("delete", err)
	default:
		k.c.prefetches++
		p := k.stem()
		n, err := k.m.Prefetch(ctx, p, salt(k.tenant))
		if err := k.check("prefetch", err); err != nil {
			return err
		}
		if n%bt != 0 || n > len(p) {
			return fmt.Errorf("goroutine %d: prefetch: %d tokens of a %d-token stem", k.g, n, len(p))
		}
	}
	return nil
}

// allocate allocates seq, waits for Ready, checks the blocks it did not compute
// and writes the ones it does. With wantMiss, any hit is a tenant-isolation
// failure (the caller knows no allocation of this tenant had the prompt).
func (k *worker) allocate(ctx context.Context, seq uint64, tokens []int64, wantMiss bool) error {
	hashes := k.hasher.Chain(nil, salt(k.tenant), tokens, bt)
	ctrs := make([]*atomic.Int32, len(hashes))
	for i, h := range hashes {
		ctrs[i] = k.w.ctr(h)
		ctrs[i].Add(1)
	}
	lowered := 0 // ctrs[:lowered] are lowered already
	lower := func(to int) {
		for ; lowered < to; lowered++ {
			ctrs[lowered].Add(-1)
		}
	}
	done := len(ctrs)
	r, err := k.m.Allocate(ctx, kvtier.AllocRequest{Seq: seq, Tokens: tokens, Salt: salt(k.tenant)})
	if errors.Is(err, kvtier.ErrNoSpace) {
		lower(done)
		k.c.noSpace++
		return nil
	}
	if err := k.check("allocate", err); err != nil {
		lower(done)
		return err
	}
	k.c.allocs++
	k.live = append(k.live, live{seq: seq, tokens: tokens})
	nb := (len(tokens) + bt - 1) / bt
	k.c.allocBlocks += nb
	if wantMiss && r.Tokens.Sum() != 0 {
		lower(done)
		return fmt.Errorf("goroutine %d (tenant %d): first allocation of a prompt by its tenant hit: %+v", k.g, k.tenant, r)
	}
	// An engine that enqueues its forward pass at once may commit before
	// the loads are in: refused (ErrNotReady) while any is in flight, and
	// refused for nothing else. The fence keeps an accepted commit's copies
	// down behind the writes below.
	var fence *gpu.SignalFence
	if k.dev != nil {
		if fence, err = gpu.NewSignalFence(k.dev); err != nil {
			lower(done)
			return k.check("fence", err)
		}
		defer fence.Signal() // on every return: a fence never signalled holds Flush
	}
	committed := false
	if k.earlyCommits && k.rng.IntN(2) == 0 {
		loading := r.Tokens.Below() > 0
		errs, err := k.m.CommitBatch(ctx, []kvtier.CommitItem{{Seq: seq, Tokens: len(tokens), After: fence}})
		if err == nil {
			err = errs[0]
		}
		switch {
		case errors.Is(err, kvtier.ErrNotReady) && loading:
			k.c.refused++
		case err == nil && loading && !isDone(r.Ready.Done()):
			lower(done)
			return fmt.Errorf("goroutine %d: seq %d: a commit was accepted while the allocation's loads were in flight (Ready pending): %+v", k.g, seq, r)
		case err == nil:
			k.c.early++
			committed = true
		default:
			lower(done)
			return k.check(fmt.Sprintf("commit before Ready (loads from below: %t)", loading), err)
		}
	}
	var out kvtier.OnboardOutcome
	select {
	case <-r.Ready.Done():
		out = r.Ready.Outcome()
	case <-k.closed:
		select {
		case <-r.Ready.Done():
			out = r.Ready.Outcome()
		case <-time.After(2 * time.Second): // hang detector for a Ready that outlives Close
			lower(done)
			k.abandoned++
			return errStop
		}
	case <-ctx.Done():
		lower(done)
		return fmt.Errorf("goroutine %d: seq %d: Ready never completed: %w", k.g, seq, ctx.Err())
	}
	blocks := r.Blocks
	if out.Blocks != nil {
		blocks = out.Blocks
	}
	k.c.late += out.Late
	k.c.failed += out.Failed
	gpuHit := r.Tokens.Of(kvtier.GPU) / bt
	k.lastGPU = r.Tokens.Of(kvtier.GPU)
	valid := out.ValidTokens / bt
	k.c.hitBlocks += gpuHit
	k.c.onboarded += valid - gpuHit
	switch {
	case len(blocks) != nb:
		lower(done)
		return fmt.Errorf("goroutine %d: seq %d: %d blocks for %d tokens", k.g, seq, len(blocks), len(tokens))
	case out.ValidTokens%bt != 0 || r.Tokens.Of(kvtier.GPU)%bt != 0 || out.ValidTokens < r.Tokens.Of(kvtier.GPU) ||
		out.ValidTokens > r.Tokens.Sum() || valid > len(hashes):
		lower(done)
		return fmt.Errorf("goroutine %d: seq %d: outcome %+v does not fit allocation %+v", k.g, seq, out, r)
	}
	// Blocks hit or loaded: this goroutine computes none of them.
	lower(valid)
	for i := range valid {
		if i < gpuHit && ctrs0(k.w, hashes[i]) != 0 {
			k.c.skippedBusy++
			continue
		}
		if err := k.verify(blocks[i], hashes[i]); errors.Is(err, gpu.ErrClosed) {
			lower(done)
			return k.check("reading a block", err)
		} else if err != nil {
			return fmt.Errorf("goroutine %d: seq %d block %d of %d (hit %d, valid %d): %w", k.g, seq, i, nb, gpuHit, valid, err)
		}
		k.c.verified++
		if i < gpuHit {
			k.c.verifiedHit++
		} else {
			k.c.verifiedOnboard++
		}
	}
	// A late engine commits first, naming its fence, while its blocks
	// still hold other bytes (poison, here), and writes them afterwards:
	// the commit makes them hits at once (readers skip them until the
	// counters fall), and every copy down must wait for the fence.
	if !committed && fence != nil && k.lateWrites && k.rng.IntN(2) == 0 {
		for i := valid; i < len(hashes); i++ {
			if err := k.m.Arena().WriteBlock(int(blocks[i]), 0, poison(k.buf)); err != nil {
				lower(done)
				return k.check(fmt.Sprintf("writing block %d", blocks[i]), err)
			}
		}
		errs, err := k.m.CommitBatch(ctx, []kvtier.CommitItem{{Seq: seq, Tokens: len(tokens), After: fence}})
		if err == nil {
			err = errs[0]
		}
		if err != nil {
			lower(done)
			return k.check("commit before the write", err)
		}
		committed = true
		k.c.lateWrites++
		runtime.Gosched() // the kernel runs late: let the copy workers go first
	}
	// Write what it computes, then let readers check those blocks.
	for i := valid; i < len(hashes); i++ {
		if err := k.m.Arena().WriteBlock(int(blocks[i]), 0, pattern(k.buf, hashes[i], k.tenant)); err != nil {
			lower(done)
			return k.check(fmt.Sprintf("writing block %d", blocks[i]), err)
		}
		k.c.written++
	}
	if fence != nil {
		fence.Signal()
	}
	// The prompt's KV is written: commit it, so it may be hit and moved down.
	if !committed {
		if err := k.m.Commit(ctx, seq, len(tokens)); err != nil {
			lower(done)
			return k.check("commit", err)
		}
	}
	lower(done)
	return nil
}

// poison fills buf with bytes no pattern has: a block's content before the
// engine's late write lands.
func poison(buf []byte) []byte {
	for i := range buf {
		buf[i] = 0xa5
	}
	return buf
}

// isDone reports whether ch is closed, without waiting.
func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func ctrs0(w *writers, h prefixhash.Hash) int32 { return w.ctr(h).Load() }

func (k *worker) verify(id kvtier.BlockID, h prefixhash.Hash) error {
	if err := k.m.Arena().ReadBlock(int(id), 0, k.buf); err != nil {
		return err
	}
	if !bytes.Equal(k.buf, pattern(k.want, h, k.tenant)) {
		if bytes.Equal(k.buf, poison(k.want)) {
			return fmt.Errorf("block id %d (hash %x, tenant %d) holds the poison a late engine's block held before its write: a copy down did not wait for the commit's fence", id, uint64(h), k.tenant)
		}
		return fmt.Errorf("block id %d does not hold the bytes of hash %x for tenant %d", id, uint64(h), k.tenant)
	}
	return nil
}

func (k *worker) append(ctx context.Context, i int) error {
	k.c.appends++
	l := &k.live[i]
	n := k.rng.IntN(bt+1) + 1
	add := make([]int64, n)
	for j := range add {
		add[j] = int64(2<<40) + int64(l.seq)*64 + int64(len(l.tokens)+j)
	}
	_, err := k.m.Append(ctx, l.seq, add)
	if errors.Is(err, kvtier.ErrNoSpace) {
		return nil
	}
	if err := k.check("append", err); err != nil {
		return err
	}
	l.tokens = append(l.tokens, add...)
	return nil
}

func (k *worker) free(ctx context.Context, i int) error {
	k.c.frees++
	seq := k.live[i].seq
	k.live = append(k.live[:i], k.live[i+1:]...)
	if seq%2 == 0 { // half the sequences finish with a class (no rng draw: seeds keep their paths)
		k.c.classed++
		errs, err := k.m.CommitBatch(ctx, []kvtier.CommitItem{{Seq: seq, Class: uint8(1 + seq%5)}})
		if err == nil {
			err = errs[0]
		}
		if err := k.check("class commit", err); err != nil {
			return err
		}
	}
	return k.check("free", k.m.Free(ctx, seq))
}

// sumCounts adds up every worker's counters.
func sumCounts(ws []*worker) counts {
	var c counts
	for _, k := range ws {
		c.add(&k.c)
	}
	return c
}
