package tier

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/prefixhash"
)

// A model of what every block holds, under random interleavings of an
// engine that commits behind fences (its passes run in order on a compute
// stream, later than the commits), frees and appends, and of a copy
// stream that runs copies in order, each once its fences are done. The
// pinned tier serves only the digests it stores, from the copies down.
// Checked: a copy down reads the KV of the digest it writes, with no pass
// still to write the block; a copy up writes a block no pass still
// writes or reads (a pass attends to its sequence's blocks); every findable block holds (or its pass will write) the KV of
// its digest; and every block an allocation is given valid (hits, loads)
// holds the KV of its own prefix. With the pool's journal on, the event
// stream (Ready.Residency, ResidencyAfter) names every hash the GPU serves,
// and one it serves no more only while a write down of it is in flight.

type cell struct {
	d  prefixhash.Digest
	ok bool // a whole block of KV for d
}

type cmPass struct {
	f      *gpu.HostFence
	writes map[blockpool.BlockID]cell
	reads  []blockpool.BlockID // attention over the sequence's blocks
}

type cmSeq struct {
	id        uint64
	ns        string
	toks      []int64
	res       messages.AllocResult
	answered  bool
	checked   bool
	written   int // tokens whose KV the engine wrote (or enqueued)
	appending bool
	freed     bool
}

type cmWorld struct {
	t       *testing.T
	rng     *rand.Rand
	tr      *Tier
	now     time.Time
	content []cell
	passes  []*cmPass // the compute stream, oldest first
	stream  []Copy    // the copy stream, in order
	fetches map[uint64][]prefixhash.Digest
	reqs    map[uint64]*messages.FetchRequest
	offers  map[uint64]*messages.OffloadRequest
	granted map[uint64][]prefixhash.Digest // an offload's copied items, in op order
	timers  map[uint64]bool
	store   map[prefixhash.Digest]bool
	seqs    []*cmSeq
	next    uint64
	log     []string
	counts  map[string]int  // what ran, for CM_STATS
	view    map[uint64]bool // the GPU's blocks by hash, as the event stream says
	batches []*pendingBatch // allocations not answered yet
	hashOf  map[prefixhash.Digest]uint64
	gone    bool // LowerGone
	// Pinned slots lent to the GPU by grants (each a fresh number), by
	// the copy that uses them, and those not yet given back.
	leased   map[CopyID][]int
	lent     map[int]bool
	nextSlot int
}

// slotsBack checks the FetchReleases and OffloadDones of r: a pinned slot
// goes back once, and only when no copy on the stream still reads or
// writes it.
func (w *cmWorld) slotsBack(r Ready) {
	w.t.Helper()
	for _, m := range r.ToPinned {
		var slots []int
		switch m := m.(type) {
		case *messages.FetchRelease:
			slots = m.Slots
		case *messages.OffloadDone:
			slots = m.Slots
		default:
			continue
		}
		for _, s := range slots {
			if !w.lent[s] {
				w.fail("pinned slot %d given back twice, or never lent", s)
			}
			delete(w.lent, s)
			for _, c := range w.stream {
				if slices.Contains(w.leased[c.CopyID], s) {
					w.fail("pinned slot %d given back while copy %+v (dir %v) on the stream still uses it", s, c.CopyID, c.Dir)
				}
			}
		}
	}
}

func (w *cmWorld) lend(id CopyID, n int) []int {
	slots := make([]int, n)
	for i := range slots {
		w.nextSlot++
		slots[i] = w.nextSlot
		w.lent[w.nextSlot] = true
	}
	w.leased[id] = append(w.leased[id], slots...)
	return slots
}

func (w *cmWorld) logf(f string, a ...any) { w.log = append(w.log, fmt.Sprintf(f, a...)) }

func (w *cmWorld) fail(f string, a ...any) {
	w.t.Helper()
	w.t.Fatalf("%s\nevents:\n  %s", fmt.Sprintf(f, a...), strings.Join(w.log, "\n  "))
}

func digests(ns string, toks []int64) []prefixhash.Digest {
	var d prefixhash.Digester
	return d.Chain(nil, ns, toks, bs)
}

// effective is what block id holds once the passes enqueued have run.
func (w *cmWorld) effective(id blockpool.BlockID) cell {
	c := w.content[id]
	for _, p := range w.passes {
		if x, ok := p.writes[id]; ok {
			c = x
		}
	}
	return c
}

func (w *cmWorld) pendingWrite(id blockpool.BlockID) bool {
	for _, p := range w.passes {
		if _, ok := p.writes[id]; ok {
			return true
		}
	}
	return false
}

func (w *cmWorld) pendingRead(id blockpool.BlockID) bool {
	for _, p := range w.passes {
		if slices.Contains(p.reads, id) {
			return true
		}
	}
	return false
}

func (w *cmWorld) drain() {
	w.t.Helper()
	r := w.tr.Ready()
	w.residency(r)
	w.stream = append(w.stream, r.Copies...)
	w.slotsBack(r) // after the copies this event put on the stream
	for _, m := range r.ToPinned {
		switch m := m.(type) {
		case *messages.FetchRequest:
			w.reqs[m.ID] = m
			w.fetches[m.ID] = m.Digests
		case *messages.OffloadRequest:
			w.offers[m.ID] = m
		}
	}
	for _, id := range r.CancelTimers {
		delete(w.timers, id)
	}
	for _, tm := range r.Timers {
		w.timers[tm.ID] = true
	}
	for _, f := range r.Replies {
		f.Reply()
	}
	for _, s := range r.Stopped {
		s.Complete()
	}
	if err := w.tr.CheckInvariants(); err != nil {
		w.fail("invariants: %v", err)
	}
	w.check()
}

func (w *cmWorld) check() {
	w.t.Helper()
	w.checkView()
	for i := range w.content {
		id := blockpool.BlockID(i)
		if _, cached := w.tr.pool.BlockHash(id); !cached {
			continue
		}
		d, _ := w.tr.pool.BlockDigest(id)
		if c := w.effective(id); !c.ok || c.d != d {
			w.fail("block %d is findable holding %x/%v, not the KV of its digest %x", id, c.d[:4], c.ok, d[:4])
		}
	}
	w.answered()
	for _, s := range w.seqs {
		if s.freed || s.checked || s.res.Ready == nil || !readyDone(s.res) {
			continue
		}
		s.checked = true
		out := s.res.Ready.Outcome()
		table, err := w.tr.pool.Table(nil, blockpool.SeqID(s.id))
		if err != nil {
			w.fail("seq %d: %v", s.id, err)
		}
		want := digests(s.ns, s.toks)
		for i := range out.ValidTokens / bs {
			if c := w.effective(table[i]); !c.ok || c.d != want[i] {
				w.fail("seq %d: block %d (index %d) within ValidTokens %d holds %x/%v, not its prefix's %x", s.id, table[i], i, out.ValidTokens, c.d[:4], c.ok, want[i][:4])
			}
		}
		s.written = out.ValidTokens
		w.counts["valid blocks checked"] += out.ValidTokens / bs
		w.counts["late blocks"] += out.Late
		if out.Blocks != nil {
			w.counts["fresh tables"]++
		}
	}
}

func (w *cmWorld) live() []*cmSeq {
	var out []*cmSeq
	for _, s := range w.seqs {
		if !s.freed && s.answered {
			out = append(out, s)
		}
	}
	return out
}

// pendingBatch is an allocation batch not answered yet: by AllocateBatch
// (res) or by Step (step).
type pendingBatch struct {
	res  *messages.AllocateBatchResult
	step chan *messages.StepResult
	seqs []*cmSeq
}

func (w *cmWorld) newRequest(taken map[uint64]bool) (*cmSeq, messages.AllocRequest, *blockpool.Keys) {
	w.next++
	id := w.next
	for _, s := range w.seqs {
		if s.freed && w.rng.IntN(3) == 0 && !taken[s.id] && !slices.ContainsFunc(w.live(), func(x *cmSeq) bool { return x.id == s.id }) {
			id = s.id // an id used before
			break
		}
	}
	taken[id] = true
	ns := []string{"", "t"}[w.rng.IntN(2)]
	fam := 1 + w.rng.IntN(3)
	n := bs*(1+w.rng.IntN(4)) + w.rng.IntN(2)*w.rng.IntN(bs)
	toks := prompt(100*fam, n)
	if w.rng.IntN(4) == 0 && n > bs {
		toks[n-1] += 7 // diverges in its last block
	}
	req := messages.AllocRequest{Seq: id, Tokens: toks}
	if w.rng.IntN(5) == 0 {
		req.MaxHitTokens = max(n-1, -1)
	}
	if w.rng.IntN(3) == 0 {
		req.LoadDeadline = w.now.Add(time.Duration(w.rng.IntN(20)) * time.Millisecond)
	}
	s := &cmSeq{id: id, ns: ns, toks: toks}
	w.logf("allocate seq %d ns %q tokens %d..+%d (%d)", id, ns, toks[0], n, req.MaxHitTokens)
	return s, req, blockpool.ComputeKeys(ns, toks, bs, true)
}

func (w *cmWorld) allocate() {
	taken := map[uint64]bool{}
	b := &pendingBatch{}
	var reqs []messages.AllocRequest
	var keys []*blockpool.Keys
	var free []uint64
	useStep := w.rng.IntN(2) == 0
	if useStep && w.rng.IntN(2) == 0 {
		var can []*cmSeq
		for _, s := range w.live() {
			if !s.appending {
				can = append(can, s)
			}
		}
		if len(can) > 0 {
			s := can[w.rng.IntN(len(can))]
			s.freed = true
			free = append(free, s.id)
			w.logf("free seq %d in the step", s.id)
		}
	}
	for range 1 + w.rng.IntN(2) {
		s, req, k := w.newRequest(taken)
		b.seqs = append(b.seqs, s)
		reqs, keys = append(reqs, req), append(keys, k)
	}
	inOrder := w.rng.IntN(2) == 0
	w.seqs = append(w.seqs, b.seqs...)
	if useStep {
		b.step = make(chan *messages.StepResult, 1)
		w.tr.Step(&messages.StepBatch{Free: free, Allocate: reqs, Keys: keys, AllocateInOrder: inOrder, Reply: b.step})
	} else if inOrder {
		w.tr.AllocateInOrder(reqs, keys, func(r *messages.AllocateBatchResult) { b.res = r })
	} else {
		w.tr.AllocateBatch(reqs, keys, func(r *messages.AllocateBatchResult) { b.res = r })
	}
	r := w.tr.Ready()
	var lk *messages.Lookup
	for _, m := range r.ToIndex {
		if l, ok := m.(*messages.Lookup); ok {
			lk = l
		}
	}
	r.ToIndex = nil
	w.replay(r)
	if lk != nil {
		tiers := make([][]messages.Tier, len(lk.Digests))
		for c, ds := range lk.Digests {
			from := messages.Pinned
			for _, d := range ds {
				if !w.store[d] && w.rng.IntN(4) != 0 {
					break
				}
				if w.rng.IntN(3) == 0 {
					from = messages.Disk // split: the pinned run, then the rest
				}
				tiers[c] = append(tiers[c], from)
			}
		}
		w.tr.LookupDone(&messages.LookupResult{ID: lk.ID, Tiers: tiers})
		w.drain()
	}
	w.batches = append(w.batches, b)
	w.check()
}

// answered takes the answers of the batches answered since.
func (w *cmWorld) answered() {
	keep := w.batches[:0]
	for _, b := range w.batches {
		var res *messages.AllocateBatchResult
		if b.step != nil {
			select {
			case sr := <-b.step:
				res = sr.Allocate
			default:
			}
		} else {
			res = b.res
		}
		if res == nil {
			keep = append(keep, b)
			continue
		}
		for i, s := range b.seqs {
			s.res, s.answered = res.Results[i], true
			w.logf("  seq %d answered: %v blocks %v", s.id, s.res.Err, s.res.Blocks)
			if s.res.Err != nil {
				s.freed = true
			}
		}
	}
	w.batches = keep
}

// residency applies r's changes for the event stream to the view.
func (w *cmWorld) residency(r Ready) {
	for _, res := range []*messages.Residency{r.Residency, r.ResidencyAfter} {
		if res == nil {
			continue
		}
		for _, c := range res.Changes {
			w.counts[fmt.Sprintf("residency stored=%v", c.Stored)]++
			if c.Stored {
				w.view[c.Hash] = true
			} else {
				delete(w.view, c.Hash)
			}
		}
	}
}

// checkView: the event stream names every hash the GPU serves, and a hash
// it serves no more only while a write down of it is in flight.
func (w *cmWorld) checkView() {
	w.t.Helper()
	served := map[uint64]bool{}
	for _, h := range w.tr.CachedHashes() {
		served[h] = true
		if !w.view[h] {
			w.fail("hash %x is findable on the GPU, never announced", h)
		}
	}
	for h := range w.view {
		if !served[h] && w.tr.evictWrites[h] == 0 {
			w.fail("hash %x announced, no longer findable, and no removal sent", h)
		}
	}
}

// replay plays a Ready taken by hand.
func (w *cmWorld) replay(r Ready) {
	w.residency(r)
	w.stream = append(w.stream, r.Copies...)
	w.slotsBack(r) // after the copies this event put on the stream
	for _, m := range r.ToPinned {
		switch m := m.(type) {
		case *messages.FetchRequest:
			w.reqs[m.ID] = m
			w.fetches[m.ID] = m.Digests
		case *messages.OffloadRequest:
			w.offers[m.ID] = m
		}
	}
	for _, tm := range r.Timers {
		w.timers[tm.ID] = true
	}
	for _, f := range r.Replies {
		f.Reply()
	}
}

// compute has the engine write and commit a chunk of s.
func (w *cmWorld) compute(s *cmSeq) {
	table, err := w.tr.pool.Table(nil, blockpool.SeqID(s.id))
	if err != nil {
		w.fail("seq %d: %v", s.id, err)
	}
	if s.written >= len(s.toks) {
		return
	}
	n := s.written + 1 + w.rng.IntN(len(s.toks)-s.written)
	want := digests(s.ns, s.toks)
	writes := map[blockpool.BlockID]cell{}
	for i := s.written / bs; i < (n+bs-1)/bs; i++ {
		id := table[i]
		if _, cached := w.tr.pool.BlockHash(id); cached {
			w.fail("seq %d: the engine writes block %d (index %d), which is findable", s.id, id, i)
		}
		for _, c := range w.stream {
			if slices.ContainsFunc(c.Ops, func(op gpu.CopyOp) bool { return op.Block == int(id) }) {
				w.fail("seq %d: the engine writes block %d (index %d), which copy %+v (dir %v) still touches", s.id, id, i, c.CopyID, c.Dir)
			}
		}
		c := cell{}
		if (i+1)*bs <= n {
			c = cell{d: want[i], ok: true}
		}
		writes[id] = c
	}
	var f gpu.Fence
	if w.rng.IntN(2) == 0 {
		hf := gpu.NewHostFence()
		w.passes = append(w.passes, &cmPass{f: hf, writes: writes, reads: table[:(n+bs-1)/bs]})
		f = hf
	} else {
		for len(w.passes) > 0 { // done: so is every pass before it
			w.runPass()
		}
		for id, c := range writes {
			w.content[id] = c
		}
	}
	s.written = n
	w.logf("seq %d computes and commits %d tokens (fence %v): %v", s.id, n, f != nil, table)
	var cr *messages.CommitBatchResult
	w.tr.CommitBatch([]messages.CommitItem{{Seq: s.id, Tokens: n, After: f}}, func(r *messages.CommitBatchResult) { cr = r })
	w.drain()
	if cr == nil || cr.Errs[0] != nil {
		w.fail("seq %d: commit of %d: %+v", s.id, n, cr)
	}
}

func (w *cmWorld) runPass() {
	p := w.passes[0]
	w.passes = w.passes[1:]
	for id, c := range p.writes {
		w.content[id] = c
	}
	p.f.Signal()
}

func (w *cmWorld) appendTo(s *cmSeq) {
	tok := []int64{int64(5000 + w.rng.IntN(3))}
	s.appending = true
	w.logf("seq %d appends %v", s.id, tok)
	w.tr.AppendBatch([]messages.AppendItem{{Seq: s.id, Tokens: tok}}, func(r *messages.AppendBatchResult) {
		s.appending = false
		if r.Errs[0] == nil {
			s.toks = append(s.toks, tok...)
		}
	})
	w.drain()
}

// runCopy runs the copy at the head of the stream once its fences are done.
func (w *cmWorld) runCopy() bool {
	if len(w.stream) == 0 {
		return false
	}
	c := w.stream[0]
	for _, f := range c.Fences {
		if !gpu.FenceDone(f) {
			return false
		}
	}
	w.stream = w.stream[1:]
	ok := w.rng.IntN(10) != 0
	w.logf("copy %+v dir %v runs, ok %v", c.CopyID, c.Dir, ok)
	w.counts[fmt.Sprintf("copy %v ok=%v", c.Dir, ok)] += len(c.Ops)
	if len(c.Fences) > 0 {
		w.counts[fmt.Sprintf("copy %v behind a fence", c.Dir)]++
	}
	for i, op := range c.Ops {
		id := blockpool.BlockID(op.Block)
		if w.pendingWrite(id) {
			w.fail("copy %+v (dir %v) runs on block %d while a pass still writes it", c.CopyID, c.Dir, id)
		}
		if c.Dir == gpu.H2D {
			if w.pendingRead(id) {
				w.fail("copy up %+v runs on block %d while a pass still reads it", c.CopyID, id)
			}
			if ok {
				w.content[id] = cell{d: w.fetches[c.ID][i], ok: true}
			} else {
				w.content[id] = cell{}
			}
			continue
		}
		d := w.granted[c.ID][i]
		if x := w.content[id]; !x.ok || x.d != d {
			w.fail("copy down %d writes block %d holding %x/%v under digest %x", c.ID, id, x.d[:4], x.ok, d[:4])
		}
		if ok {
			w.store[d] = true
		}
	}
	var err error
	if !ok {
		err = errTestCopy
	}
	w.tr.CopyDone(c.CopyID, err)
	w.drain()
	return true
}

func (w *cmWorld) grant(id uint64) {
	req := w.reqs[id]
	delete(w.reqs, id)
	n := 0
	for n < len(req.Digests) && w.store[req.Digests[n]] {
		n++
	}
	if w.rng.IntN(4) == 0 {
		n = w.rng.IntN(n + 1)
	}
	slots := w.lend(CopyID{ID: id, Fetch: true}, n)
	why := messages.MissNone
	if n < len(req.Digests) {
		why = messages.MissEvicted
	}
	w.logf("grant fetch %d: %d of %d", id, n, len(req.Digests))
	w.tr.FetchGranted(&messages.FetchGrant{ID: id, Slots: slots, Bytes: make([][]byte, n), Short: why})
	w.drain()
}

func (w *cmWorld) answerOffer(id uint64) {
	m := w.offers[id]
	delete(w.offers, id)
	slots := make([]int, len(m.Items))
	var got []prefixhash.Digest
	for i, it := range m.Items {
		switch {
		case w.rng.IntN(5) == 0:
			slots[i] = messages.SlotDenied
		case w.store[it.Digest] && w.rng.IntN(2) == 0:
			slots[i] = messages.SlotExists
		default:
			got = append(got, it.Digest)
			slots[i] = w.lend(CopyID{ID: id}, 1)[0]
		}
		w.hashOf[it.Digest] = it.Hash
	}
	w.granted[id] = got
	w.logf("offload %d answered %v", id, slots)
	w.tr.OffloadGranted(&messages.OffloadGrant{ID: id, Slots: slots, Bytes: make([][]byte, len(slots))})
	w.drain()
}

func (w *cmWorld) step() {
	for {
		switch k := w.rng.IntN(100); {
		case k < 12:
			if len(w.live()) < 4 {
				w.allocate()
				return
			}
		case k < 35:
			if w.runCopy() {
				return
			}
		case k < 45:
			if len(w.reqs) > 0 {
				w.grant(pick(w.rng, w.reqs))
				return
			}
		case k < 52:
			if len(w.offers) > 0 {
				w.answerOffer(pick(w.rng, w.offers))
				return
			}
		case k < 58:
			if len(w.passes) > 0 {
				w.logf("a pass ends")
				w.runPass()
				w.drain()
				return
			}
		case k < 60:
			if len(w.store) > 0 && w.rng.IntN(2) == 0 {
				d := pick(w.rng, w.store)
				delete(w.store, d)
				w.logf("pinned memory drops %x", d[:4])
				w.tr.BelowGone([]uint64{w.hashOf[d]})
				w.drain()
				return
			}
			if !w.gone && w.rng.IntN(20) == 0 {
				w.gone = true
				w.logf("LowerGone")
				w.tr.LowerGone()
				w.drain()
				return
			}
		case k < 63:
			if len(w.timers) > 0 {
				id := pick(w.rng, w.timers)
				delete(w.timers, id)
				w.now = w.now.Add(20 * time.Millisecond)
				w.tr.SetNow(w.now)
				w.logf("timer %d fires", id)
				w.tr.Deadline(id)
				w.drain()
				return
			}
		case k < 88:
			var ready []*cmSeq
			for _, s := range w.live() {
				if s.checked && !s.appending {
					ready = append(ready, s)
				}
			}
			if len(ready) == 0 {
				continue
			}
			s := ready[w.rng.IntN(len(ready))]
			switch {
			case s.written < len(s.toks):
				w.compute(s)
			case w.rng.IntN(2) == 0:
				w.appendTo(s)
			default:
				continue
			}
			return
		case k < 96:
			var can []*cmSeq
			for _, s := range w.live() {
				if !s.appending {
					can = append(can, s)
				}
			}
			if len(can) == 0 {
				continue
			}
			s := can[w.rng.IntN(len(can))]
			s.freed = true
			swap := w.rng.IntN(3) == 0
			if !swap && s.id%2 == 0 {
				// A finishing class (drawing nothing from rng): it
				// steers write-downs only, and its claims end at the
				// free, which the invariants walk checks.
				c := uint8(1 + s.id%7)
				w.logf("seq %d finishes with class %d", s.id, c)
				var cr *messages.CommitBatchResult
				w.tr.CommitBatch([]messages.CommitItem{{Seq: s.id, Class: c}}, func(r *messages.CommitBatchResult) { cr = r })
				w.drain()
				if cr == nil || (cr.Errs[0] != nil && !errors.Is(cr.Errs[0], ErrNotReady)) {
					w.fail("seq %d: class commit: %+v", s.id, cr)
				}
			}
			w.logf("free seq %d (swap %v)", s.id, swap)
			w.tr.FreeBatch([]uint64{s.id}, swap, func(*messages.FreeBatchResult) {})
			w.drain()
			return
		default:
			if len(w.seqs) > 0 {
				s := w.seqs[w.rng.IntN(len(w.seqs))]
				p := s.toks[:bs*(len(s.toks)/bs)]
				if len(p) == 0 {
					continue
				}
				w.logf("delete the chain of seq %d", s.id)
				w.tr.Query(&messages.Query{Kind: messages.QueryDelete, Tokens: p, Keys: blockpool.ComputeKeys(s.ns, p, bs, true), Reply: make(chan *messages.QueryResult, 1)})
				w.drain()
				return
			}
		}
	}
}

func runContentModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5851f42d4c957f2d))
	cfg := Config{Lower: true, OffloadThreshold: 0.5, OffloadAhead: 2}
	cfg.Ingestion = []Ingestion{IngestEvict, IngestAll, IngestHot}[rng.IntN(3)]
	cfg.HotHits = 1
	if rng.IntN(3) == 0 {
		cfg.SerialOffloads = true
	}
	if rng.IntN(2) == 0 {
		cfg.ReadBase = 10 * time.Millisecond
	}
	n := 8 + rng.IntN(8)
	pool, err := blockpool.New(blockpool.Config{NumBlocks: n, BlockSize: bs, Digests: true, Journal: true})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Pool, cfg.BlockBytes, cfg.DoubleGetMinBlocks = pool, 64, 1
	tr := New(cfg)
	tr.SetNow(t0)
	w := &cmWorld{view: map[uint64]bool{}, t: t, rng: rng, tr: tr, now: t0, content: make([]cell, n), fetches: map[uint64][]prefixhash.Digest{},
		reqs: map[uint64]*messages.FetchRequest{}, offers: map[uint64]*messages.OffloadRequest{}, granted: map[uint64][]prefixhash.Digest{},
		timers: map[uint64]bool{}, store: map[prefixhash.Digest]bool{}, counts: map[string]int{}, hashOf: map[prefixhash.Digest]uint64{},
		leased: map[CopyID][]int{}, lent: map[int]bool{}}
	w.logf("seed %d: %d blocks, %+v", seed, n, cfg.Ingestion)
	for range steps {
		w.step()
	}
	if os.Getenv("CM_STATS") != "" {
		for k, v := range w.counts {
			cmStats[k] += v
		}
	}
}

var cmStats = map[string]int{}

// TestContentModel runs random worlds (CM_SEEDS, CM_SEED, CM_STEPS).
func TestContentModel(t *testing.T) {
	seeds, steps := 2000, 150
	if s := os.Getenv("CM_SEEDS"); s != "" {
		seeds, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("CM_STEPS"); s != "" {
		steps, _ = strconv.Atoi(s)
	}
	if s := os.Getenv("CM_SEED"); s != "" {
		v, _ := strconv.ParseUint(s, 10, 64)
		runContentModel(t, v, steps)
		return
	}
	for seed := range uint64(seeds) {
		if !t.Run(fmt.Sprint(seed), func(t *testing.T) { runContentModel(t, seed, steps) }) {
			break
		}
	}
	if len(cmStats) > 0 {
		t.Logf("%v", cmStats)
	}
}
