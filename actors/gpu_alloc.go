package actors

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/prefixhash"
)

type pendingAlloc struct {
	reqs    []messages.AllocRequest
	keys    []*blockpool.Keys
	b       *batchReply
	waiting []int // indexes of requests waiting for the lookup
	gpu     []int // GPU hit blocks seen at lookup time, per waiting request
}

// batchReply answers an AllocateBatch once all its requests are decided.
type batchReply struct {
	send   func(*messages.AllocateBatchResult) // nil once sent
	res    *messages.AllocateBatchResult
	parked int  // requests waiting for pinned blocks to come free
	ready  bool // every request not parked is decided
}

func (b *batchReply) maybeSend() {
	if b.ready && b.parked == 0 && b.send != nil {
		b.send(b.res)
		b.send = nil
	}
}

// allocateBatch allocates what needs no lower tier at once and asks the index
// about the rest, in one Lookup for the whole batch.
// It reports whether allocations wait for the index: the caller then leaves the
// offload ahead of need to lookupDone, as it would pin blocks they are about to take.
func (a *GPUActor) allocateBatch(ctx actor.Context, reqs []messages.AllocRequest, keys []*blockpool.Keys, send func(*messages.AllocateBatchResult)) (waiting bool) {
	res := &messages.AllocateBatchResult{Results: make([]messages.AllocResult, len(reqs))}
	b := &batchReply{send: send, res: res}
	var pend *pendingAlloc
	var chains [][]uint64
	for i := range reqs {
		r := &reqs[i]
		out := &res.Results[i]
		out.Seq = r.Seq
		if r.MaxSeqLen > 0 && len(r.Tokens) > r.MaxSeqLen {
			if !r.Truncate {
				out.Err = fmt.Errorf("%w: %d tokens, MaxSeqLen %d", ErrTooLong, len(r.Tokens), r.MaxSeqLen)
				continue
			}
			out.Truncated = len(r.Tokens) - r.MaxSeqLen
			r.Tokens = r.Tokens[:r.MaxSeqLen]
		}
		k := keys[i]
		if k == nil || len(k.Hashes) != len(r.Tokens)/a.bs {
			out.Err = fmt.Errorf("%w: request %d carries no keys for its %d tokens", blockpool.ErrBadArgument, r.Seq, len(r.Tokens))
			continue
		}
		if !a.lower() || len(r.Tokens) < a.bs {
			a.allocate(ctx, r, k, out, 0, nil, b)
			continue
		}
		hits, err := a.pool.CachedBlocks(r.Tokens, k)
		if err != nil {
			out.Err = err
			continue
		}
		hashes := k.Hashes
		if hits == len(hashes) {
			a.allocate(ctx, r, k, out, 0, nil, b)
			continue
		}
		if pend == nil {
			pend = &pendingAlloc{reqs: reqs, keys: keys, b: b}
		}
		pend.waiting = append(pend.waiting, i)
		pend.gpu = append(pend.gpu, hits)
		chain := make([]uint64, len(hashes)-hits)
		for j, h := range hashes[hits:] {
			chain[j] = uint64(h)
		}
		chains = append(chains, chain)
	}
	if pend == nil {
		b.ready = true
		b.maybeSend()
		return false
	}
	id := a.newID()
	a.lookups[id] = pend
	ctx.Request(a.cfg.Index, &messages.Lookup{ID: id, Chains: chains})
	return true
}

func (a *GPUActor) lookupDone(ctx actor.Context, m *messages.LookupResult) {
	pend, ok := a.lookups[m.ID]
	if !ok {
		a.cfg.Log.Warn("gpu actor: lookup result for an unknown batch", zap.Uint64("id", m.ID))
		return
	}
	delete(a.lookups, m.ID)
	for k, i := range pend.waiting {
		r := &pend.reqs[i]
		a.allocate(ctx, r, pend.keys[i], &pend.b.res.Results[i], pend.gpu[k], m.Tiers[k], pend.b)
	}
	a.afterBatch(ctx)
	pend.b.ready = true
	pend.b.maybeSend()
}

// allocate allocates one request; below lists the tiers of the blocks after the
// first gpuAt blocks that lower tiers hold.
func (a *GPUActor) allocate(ctx actor.Context, r *messages.AllocRequest, k *blockpool.Keys, out *messages.AllocResult, gpuAt int, below []messages.Tier, b *batchReply) {
	nb := a.blocksFor(len(r.Tokens))
	if len(below) > 0 && (len(below) < a.cfg.DoubleGetMinBlocks || float64(len(below)) < a.cfg.DoubleGetMinRatio*float64(nb)) {
		a.stats.DoubleGetSkips += uint64(len(below))
		below = nil
	}
	alloc, err := a.pool.AllocateRequest(blockpool.Request{Seq: blockpool.SeqID(r.Seq), Tokens: r.Tokens, NS: k.NS, Keys: k, Lookahead: r.Lookahead})
	if a.parkable(err) {
		b.parked++
		a.parked = append(a.parked, func(ctx actor.Context) {
			b.parked--
			a.allocate(ctx, r, k, out, gpuAt, below, b)
			b.maybeSend()
		})
		return
	}
	if err != nil {
		out.Err = err
		return
	}
	out.Blocks = alloc.Blocks
	out.GPUTokens = alloc.CachedTokens
	a.stats.Hits += uint64(alloc.HitBlocks)
	a.stats.Misses += uint64(nb - alloc.HitBlocks)
	w := &waiter{seq: blockpool.SeqID(r.Seq), c: messages.NewCompletion(), pending: 1}
	w.out.ValidTokens = alloc.CachedTokens
	out.Ready = w.c
	evictOp := a.offloadEvicted(ctx, w) // before the reused blocks' flags are reset
	for _, id := range alloc.Blocks[alloc.HitBlocks:] {
		a.flags[id], a.hits[id] = 0, 0
	}
	// Hits are committed blocks only (the pool finds nothing else), so hot
	// ones hold computed KV and may be written down.
	if a.cfg.Ingestion == IngestHot {
		var hot []blockpool.BlockID
		for _, id := range alloc.Blocks[:alloc.HitBlocks] {
			if a.hits[id] < 1<<15 {
				a.hits[id]++
			}
			if int(a.hits[id]) >= a.cfg.HotHits && a.flags[id]&(flagBelow|flagMoving) == 0 {
				hot = append(hot, id)
			}
		}
		a.offloadResident(ctx, hot)
	}
	// Blocks the lower tiers hold, contiguous after the GPU hits.
	start := alloc.HitBlocks
	if skip := start - gpuAt; skip >= 0 && skip < len(below) {
		load := below[skip:]
		op := &fetchOp{w: w, first: start}
		for j := range load {
			id := alloc.Blocks[start+j]
			// Filled but not findable until its bytes arrive, verified.
			a.pool.Pin(id)
			op.blocks = append(op.blocks, id)
			op.hashes = append(op.hashes, uint64(k.Hashes[start+j]))
			op.digests = append(op.digests, k.Digests[start+j])
			if load[j] == messages.Disk {
				out.DiskTokens += a.bs
			} else {
				out.PinnedTokens += a.bs
			}
		}
		w.pending++
		w.loading = true
		a.notReady[w.seq]++
		id := a.newID()
		a.fetches[id] = op
		tokens := len(op.blocks) * a.bs
		var deadline time.Time
		if a.cfg.ReadPerToken > 0 || a.cfg.ReadBase > 0 {
			d := a.cfg.ReadBase + time.Duration(tokens)*a.cfg.ReadPerToken
			deadline = time.Now().Add(d)
			self, sys := ctx.Self(), ctx.ActorSystem()
			op.timer = time.AfterFunc(d, func() { sys.Root.Send(self, &fetchTimeout{id: id}) })
		}
		req := &messages.FetchRequest{ID: id, Hashes: op.hashes, Digests: op.digests, Deadline: deadline}
		if evictOp != nil {
			// The loads land in blocks whose old bytes are still being copied out.
			evictOp.then = append(evictOp.then, func(ctx actor.Context) { ctx.Request(a.cfg.Pinned, req) })
		} else {
			ctx.Request(a.cfg.Pinned, req)
		}
	}
	w.done(a)
}

// appendBatch appends and answers once the evicted bytes of any block the
// appends took are copied out, since the caller writes those blocks next.
func (a *GPUActor) appendBatch(ctx actor.Context, items []messages.AppendItem, send func(*messages.AppendBatchResult)) {
	res := &messages.AppendBatchResult{Errs: make([]error, len(items)), Blocks: make([][]blockpool.BlockID, len(items))}
	w := &waiter{pending: 1, onDone: func() { send(res) }}
	for i, it := range items {
		res.Errs[i] = a.appendOne(ctx, it, &res.Errs[i], &res.Blocks[i], w)
		a.offloadEvicted(ctx, w)
	}
	w.done(a)
}

// appendOne appends it, parking it (w waits) while offloads ahead of need pin
// the blocks it needs. The blocks it took go to *took.
func (a *GPUActor) appendOne(ctx actor.Context, it messages.AppendItem, errp *error, took *[]blockpool.BlockID, w *waiter) error {
	seq := blockpool.SeqID(it.Seq)
	ids, err := a.pool.AppendTokens(seq, it.Tokens, it.Lookahead, nil)
	// Blocks the append took start with no copy below and no hits.
	for _, id := range ids {
		a.flags[id], a.hits[id] = 0, 0
	}
	if a.parkable(err) {
		w.pending++
		a.parked = append(a.parked, func(ctx actor.Context) {
			*errp = a.appendOne(ctx, it, errp, took, w)
			a.offloadEvicted(ctx, w)
			w.done(a)
		})
		return nil
	}
	*took = ids
	return err
}

// commitBatch commits what the caller computed. Under IngestAll the blocks a
// commit makes findable are written through at once.
func (a *GPUActor) commitBatch(ctx actor.Context, items []messages.CommitItem) *messages.CommitBatchResult {
	res := &messages.CommitBatchResult{Errs: make([]error, len(items))}
	published := a.scratch[:0]
	for i, it := range items {
		seq := blockpool.SeqID(it.Seq)
		if a.notReady[seq] > 0 {
			res.Errs[i] = fmt.Errorf("%w: sequence %d", ErrNotReady, it.Seq)
			continue
		}
		from := len(published)
		published, res.Errs[i] = a.pool.Commit(seq, it.Tokens, published)
		for _, id := range published[from:] {
			a.fence[id] = it.After
		}
	}
	a.scratch = published[:0]
	if a.cfg.Ingestion == IngestAll {
		a.offloadResident(ctx, published)
	}
	return res
}

// parkable says whether err is a lack of blocks that offloads ahead of need
// will end: the blocks their copies pin come free when the copies are out.
func (a *GPUActor) parkable(err error) bool {
	var ns *blockpool.NoSpaceError
	if !errors.As(err, &ns) {
		return false
	}
	releasable := 0
	for _, op := range a.offload {
		if op.evict {
			continue
		}
		for _, id := range op.blocks {
			if a.pool.RefCount(id) == a.pool.Pinned(id) {
				releasable++
			}
		}
	}
	return releasable > 0 && ns.Needed <= ns.Free+releasable
}

// retryParked runs the parked requests again, in order.
func (a *GPUActor) retryParked(ctx actor.Context) {
	list := a.parked
	a.parked = nil
	for _, f := range list {
		f(ctx)
	}
}

// sealedBlocks appends seq's committed blocks not yet written down. Blocks
// never committed (a prefill cut short, an abort) hold no KV worth keeping and
// are left out.
func (a *GPUActor) sealedBlocks(dst []blockpool.BlockID, seq blockpool.SeqID) []blockpool.BlockID {
	table, err := a.pool.Table(nil, seq)
	if err != nil {
		return dst
	}
	for _, id := range table {
		if _, cached := a.pool.BlockHash(id); cached && a.flags[id]&(flagBelow|flagMoving) == 0 {
			dst = append(dst, id)
		}
	}
	return dst
}

// freeBatch frees seqs; with swap their committed blocks that have no copy
// below yet are written down first.
func (a *GPUActor) freeBatch(ctx actor.Context, seqs []uint64, swap bool, send func(*messages.FreeBatchResult)) {
	res := &messages.FreeBatchResult{Errs: make([]error, len(seqs))}
	var all []blockpool.BlockID
	for i, s := range seqs {
		if swap { // IngestAll wrote committed blocks through at commit
			all = a.sealedBlocks(all, blockpool.SeqID(s))
		}
		res.Errs[i] = a.pool.Deallocate(blockpool.SeqID(s))
	}
	a.offloadResident(ctx, all)
	send(res)
}

// step runs one scheduler step in one message: commits, frees, then appends,
// then allocations, answering once all are decided.
func (a *GPUActor) step(ctx actor.Context, m *messages.StepBatch) {
	res := &messages.StepResult{Commit: a.commitBatch(ctx, m.Commit)}
	parts := 3
	done := func() {
		if parts--; parts == 0 {
			m.Reply <- res
		}
	}
	a.freeBatch(ctx, m.Free, false /* swap */, func(r *messages.FreeBatchResult) { res.Free = r; done() })
	a.appendBatch(ctx, m.Append, func(r *messages.AppendBatchResult) { res.Append = r; done() })
	if !a.allocateBatch(ctx, m.Allocate, m.Keys, func(r *messages.AllocateBatchResult) { res.Allocate = r; done() }) {
		a.afterBatch(ctx)
	}
}

// afterBatch offloads free cached blocks ahead of need when the GPU holds data in
// more than OffloadThreshold of its blocks, starting with the next to be evicted.
func (a *GPUActor) afterBatch(ctx actor.Context) {
	if !a.lower() || a.cfg.Ingestion != IngestEvict || a.cfg.OffloadAhead <= 0 {
		return
	}
	st := a.pool.Stats()
	if float64(st.Used+st.FreeCached) < a.cfg.OffloadThreshold*float64(st.NumBlocks) {
		return
	}
	var ids []blockpool.BlockID
	a.pool.FreeCached(func(id blockpool.BlockID, _ prefixhash.Hash) bool {
		if a.flags[id]&(flagBelow|flagMoving) == 0 {
			ids = append(ids, id)
		}
		return len(ids) < a.cfg.OffloadAhead
	})
	a.offloadResident(ctx, ids)
}

// blocksFor is the number of blocks tokens tokens take.
func (a *GPUActor) blocksFor(tokens int) int { return (tokens + a.bs - 1) / a.bs }
