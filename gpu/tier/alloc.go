package tier

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/prefixhash"
)

type pendingAlloc struct {
	reqs    []messages.AllocRequest
	keys    []*blockpool.Keys
	b       *batchReply
	waiting []int // indexes of requests waiting for the lookup
	gpu     []int // GPU hit blocks seen at lookup time, per waiting request
	call    *messages.Call
	ord     *orderedAlloc // an ordered batch: every request waits for the lookup
}

// orderedAlloc is a batch allocated first come, first served: its requests
// are allocated one after another, in order, and once one finds no free GPU
// blocks the ones after it are not tried (they fail with ErrNoSpace, hold
// nothing and load nothing). A request that parks holds back the ones after
// it: they run in its continuation.
type orderedAlloc struct {
	reqs  []messages.AllocRequest
	keys  []*blockpool.Keys
	b     *batchReply
	gpuAt []int             // GPU hit blocks seen at lookup time, per request
	below [][]messages.Tier // lower tiers' blocks after them, per request
	stop  func(seq uint64) error
}

// batchReply answers an AllocateBatch once all its requests are decided.
type batchReply struct {
	send   func(*messages.AllocateBatchResult) // nil once sent
	res    *messages.AllocateBatchResult
	parked int           // requests waiting for pinned blocks to come free
	ready  bool          // every request not parked is decided
	ord    *orderedAlloc // an ordered batch (AllocateInOrder), else nil
}

func (b *batchReply) maybeSend(t *Tier) {
	if b.ready && b.parked == 0 && b.send != nil {
		send, res := b.send, b.res
		t.reply(func() { send(res) })
		b.send = nil
	}
}

// allocateBatch allocates what needs no lower tier at once and asks the index
// about the rest, in one Lookup for the whole batch. With inOrder every
// request waits for that lookup and the batch is allocated in order
// (orderedAlloc).
// It reports whether allocations wait for the index: the caller then leaves the
// offload ahead of need to lookupDone, as it would pin blocks they are about to take.
func (t *Tier) allocateBatch(reqs []messages.AllocRequest, keys []*blockpool.Keys, inOrder bool, send func(*messages.AllocateBatchResult)) (waiting bool) {
	res := &messages.AllocateBatchResult{Results: make([]messages.AllocResult, len(reqs))}
	b := &batchReply{send: send, res: res}
	var ord *orderedAlloc
	if inOrder {
		ord = &orderedAlloc{reqs: reqs, keys: keys, b: b, gpuAt: make([]int, len(reqs)), below: make([][]messages.Tier, len(reqs))}
		b.ord = ord
	}
	var pend *pendingAlloc
	var chains [][]uint64
	var digests [][]prefixhash.Digest
	again := repeated(t, reqs, func(r messages.AllocRequest) uint64 { return r.Seq })
	for i := range reqs {
		r := &reqs[i]
		out := &res.Results[i]
		out.Seq = r.Seq
		if again != nil && again[i] {
			out.Err = repeatedErr(r.Seq)
			continue
		}
		if r.MaxSeqLen < 0 {
			out.Err = fmt.Errorf("%w: request %d: MaxSeqLen %d is negative (0 means no bound)", blockpool.ErrBadArgument, r.Seq, r.MaxSeqLen)
			continue
		}
		if r.MaxSeqLen > 0 && len(r.Tokens) > r.MaxSeqLen {
			if !r.Truncate {
				out.Err = fmt.Errorf("%w: %d tokens, MaxSeqLen %d", ErrTooLong, len(r.Tokens), r.MaxSeqLen)
				continue
			}
			out.Truncated = len(r.Tokens) - r.MaxSeqLen
			r.Tokens = r.Tokens[:r.MaxSeqLen]
		}
		k := keys[i]
		if k == nil || len(k.Hashes) != len(r.Tokens)/t.bs {
			out.Err = fmt.Errorf("%w: request %d carries no keys for its %d tokens", blockpool.ErrBadArgument, r.Seq, len(r.Tokens))
			continue
		}
		if !t.lower() || len(r.Tokens) < t.bs {
			if ord == nil {
				t.allocate(r, k, out, 0, nil, b, i)
			}
			continue
		}
		hits, err := t.pool.CachedBlocks(r.Tokens, k)
		if err != nil {
			out.Err = err
			continue
		}
		hashes := k.Hashes
		if hits == len(hashes) {
			if ord == nil {
				t.allocate(r, k, out, 0, nil, b, i)
			}
			continue
		}
		if pend == nil {
			pend = &pendingAlloc{reqs: reqs, keys: keys, b: b, call: t.call, ord: ord}
		}
		pend.waiting = append(pend.waiting, i)
		pend.gpu = append(pend.gpu, hits)
		chain := make([]uint64, len(hashes)-hits)
		for j, h := range hashes[hits:] {
			chain[j] = uint64(h)
		}
		chains = append(chains, chain)
		digests = append(digests, k.Digests[hits:])
	}
	if pend == nil {
		if ord != nil {
			t.allocateInOrder(ord, 0)
		}
		b.ready = true
		b.maybeSend(t)
		return false
	}
	id := t.newID()
	t.lookups[id] = pend
	t.toIndex(&messages.Lookup{ID: id, Chains: chains, Digests: digests})
	return true
}

func (t *Tier) lookupDone(m *messages.LookupResult) {
	pend, ok := t.lookups[m.ID]
	if !ok {
		t.cfg.Log.Warn("gpu tier: lookup result for an unknown batch", zap.Uint64("id", m.ID))
		return
	}
	delete(t.lookups, m.ID)
	prev := t.call
	t.call = pend.call // what parks now stays its request's
	defer func() { t.call = prev }()
	if o := pend.ord; o != nil {
		for k, i := range pend.waiting {
			o.gpuAt[i], o.below[i] = pend.gpu[k], orNoRun(m, k)
		}
		t.allocateInOrder(o, 0)
	} else {
		for k, i := range pend.waiting {
			r := &pend.reqs[i]
			t.allocate(r, pend.keys[i], &pend.b.res.Results[i], pend.gpu[k], orNoRun(m, k), pend.b, i)
		}
	}
	t.afterBatch()
	pend.b.ready = true
	pend.b.maybeSend(t)
}

// orNoRun is m's answer for chain k, or noRun when it has none: a request
// that looked up below passes allocate a run that is not nil. A Lookup
// nobody answered (m.Unanswered) gives nil: its empty runs say nothing of
// what the tiers below hold, so they are not demand either.
func orNoRun(m *messages.LookupResult, k int) []messages.Tier {
	switch {
	case m.Unanswered:
		return nil
	case k < len(m.Tiers) && m.Tiers[k] != nil:
		return m.Tiers[k]
	}
	return noRun
}

// allocateInOrder allocates o's requests from the from'th on, in order,
// until one parks (its continuation carries on after it) or all are
// decided. Requests refused before allocation (out.Err set) are skipped.
func (t *Tier) allocateInOrder(o *orderedAlloc, from int) {
	for i := from; i < len(o.reqs); i++ {
		r, out := &o.reqs[i], &o.b.res.Results[i]
		if out.Err != nil {
			continue
		}
		if o.stop != nil {
			out.Err = o.stop(r.Seq)
			continue
		}
		if t.allocate(r, o.keys[i], out, o.gpuAt[i], o.below[i], o.b, i) {
			return // carryOn goes on once it is decided
		}
		o.decided(i, false)
	}
}

// decided notes the outcome of request i: a lack of blocks, or a request
// answered without being applied (its caller withdrew, the tier stopped),
// leaves the requests after it untried.
func (o *orderedAlloc) decided(i int, canceled bool) {
	err, seq := o.b.res.Results[i].Err, o.reqs[i].Seq
	switch {
	case err == nil:
	case canceled:
		o.stop = func(s uint64) error {
			return fmt.Errorf("sequence %d not tried: sequence %d ahead of it in the ordered batch was not applied: %w", s, seq, err)
		}
	case errors.Is(err, blockpool.ErrNoSpace):
		o.stop = func(s uint64) error {
			return fmt.Errorf("%w: sequence %d not tried: sequence %d ahead of it in the ordered batch got no blocks", blockpool.ErrNoSpace, s, seq)
		}
	}
}

// carryOn goes on with an ordered batch once its request at, which parked,
// is decided (canceled: answered without being applied).
func (t *Tier) carryOn(b *batchReply, at int, canceled bool) {
	if o := b.ord; o != nil {
		o.decided(at, canceled)
		t.allocateInOrder(o, at+1)
	}
}

// allocate allocates request at of batch b; below lists the tiers of the
// blocks after the first gpuAt blocks that lower tiers hold: the index's
// answer for the request's Lookup, not nil (noRun when empty), or nil when
// the request did not look up below. It reports whether the request parked
// (an ordered batch carries on once it is decided: carryOn).
func (t *Tier) allocate(r *messages.AllocRequest, k *blockpool.Keys, out *messages.AllocResult, gpuAt int, below []messages.Tier, b *batchReply, at int) (parked bool) {
	if !t.lower() {
		// A parked request retried after LowerGone: its lookup's answer
		// names tiers that will answer nothing now.
		below = nil
	}
	run := below // the index's answer, kept whole for a retry and for noteDemand
	nb := t.blocksFor(len(r.Tokens))
	skipped := 0 // blocks below not loaded: too few for a double get
	if len(below) > 0 && (len(below) < t.cfg.DoubleGetMinBlocks || float64(len(below)) < t.cfg.DoubleGetMinRatio*float64(nb)) {
		skipped, below = len(below), nil
	}
	maxHits := 0 // blocks: 0 no cap, < 0 none
	if r.MaxHitTokens < 0 || (r.MaxHitTokens > 0 && r.MaxHitTokens < t.bs) {
		maxHits = -1
	} else if r.MaxHitTokens > 0 {
		maxHits = r.MaxHitTokens / t.bs
	}
	alloc, err := t.pool.AllocateRequest(blockpool.Request{Seq: blockpool.SeqID(r.Seq), Tokens: r.Tokens, NS: k.NS, Keys: k, Lookahead: r.Lookahead, MaxHits: maxHits})
	if t.parkable(err) {
		t.park(r, k, out, gpuAt, run, b, at)
		return true
	}
	if err != nil {
		out.Err = err
		return false
	}
	out.Blocks = alloc.Blocks
	out.Tokens[messages.GPU.Index()] = alloc.CachedTokens
	w := &waiter{seq: blockpool.SeqID(r.Seq), pending: 1}
	w.out.ValidTokens = alloc.CachedTokens
	out.Ready = &w.c
	evictOp := t.offloadEvicted(w) // before the reused blocks' flags are reset
	t.resetBlocks(alloc.Blocks[alloc.HitBlocks:])
	t.setSeqClass(blockpool.SeqID(r.Seq), r.Class)
	// Hits are committed blocks only (the pool finds nothing else), so hot
	// ones hold computed KV and may be written down.
	if t.cfg.Ingestion == IngestHot {
		var hot []blockpool.BlockID
		for _, id := range alloc.Blocks[:alloc.HitBlocks] {
			if t.hits[id] < 1<<15 {
				t.hits[id]++
			}
			if int(t.hits[id]) >= t.cfg.HotHits && t.flags[id]&(flagBelow|flagMoving) == 0 {
				hot = append(hot, id)
			}
		}
		t.offloadResident(hot)
	}
	// Blocks the lower tiers hold, contiguous after the GPU hits.
	var ops []*fetchOp
	start := alloc.HitBlocks
	if maxHits < 0 {
		below = nil
	} else if maxHits > 0 && gpuAt+len(below) > maxHits {
		below = below[:max(maxHits-gpuAt, 0)]
	}
	if skip := start - gpuAt; skip >= 0 && skip < len(below) {
		load := below[skip:]
		for j := range load {
			out.Tokens[load[j].Index()] += t.bs
		}
		deadline, timed := t.loadDeadline(r, len(load)*t.bs)
		// Under a deadline the leading run pinned memory holds loads apart
		// from the rest (disk, remote), so that it counts when the slower
		// reads are late; the rest asks the tiers below to answer ahead of
		// the deadline (lowerDeadline), with the leading blocks they have
		// read by then, which count too.
		cut := len(load)
		if timed {
			if n := pinnedRun(load); n > 0 {
				cut = n
			}
		}
		w.loading = true
		t.notReady[w.seq] = w
		for from, to := 0, cut; from < len(load); from, to = to, len(load) {
			op := &fetchOp{w: w, first: start + from, want: to - from, timed: timed, deadline: deadline}
			if timed {
				op.askBy = t.lowerDeadline(deadline, to-from, load[from:to])
			}
			for j := start + from; j < start+to; j++ {
				id := alloc.Blocks[j]
				// Filled but not findable until its bytes arrive, verified.
				t.pool.Pin(id)
				op.blocks = append(op.blocks, id)
				op.hashes = append(op.hashes, uint64(k.Hashes[j]))
				op.digests = append(op.digests, k.Digests[j])
			}
			if n := len(ops); n > 0 {
				op.prev, ops[n-1].next = ops[n-1], op
			}
			w.pending++
			op.id = t.newID()
			t.fetches[op.id] = op
			ops = append(ops, op)
		}
	}
	// Before the loads start: one may give up at once (its deadline has
	// passed), and what it gave up must lower held.
	if run != nil {
		held := 0 // tokens the cache gives it: GPU hits and loads
		for _, n := range out.Tokens {
			held += n
		}
		t.noteDemand(w, k, gpuAt, run, held)
	}
	for _, op := range ops {
		t.launchFetch(op, evictOp)
	}
	if !r.Again { // a request's lookup counts once
		t.stats.DoubleGetSkips += uint64(skipped)
		t.stats.Hits += uint64(alloc.HitBlocks)
		t.stats.Misses += uint64(nb - alloc.HitBlocks)
		t.countTokens(r.Salt, len(r.Tokens), out)
	}
	w.done(t)
	return false
}

// park retries allocate once offloads ahead of need release blocks. It is its
// own function so that allocate's arguments escape only when it parks.
// An ordered batch carries on once the request is decided, before the batch
// can be answered.
func (t *Tier) park(r *messages.AllocRequest, k *blockpool.Keys, out *messages.AllocResult, gpuAt int, below []messages.Tier, b *batchReply, at int) {
	b.parked++
	t.parkReq(func() {
		b.parked--
		if !t.allocate(r, k, out, gpuAt, below, b, at) {
			t.carryOn(b, at, false)
		}
		b.maybeSend(t)
	}, func(err error) {
		b.parked--
		out.Err = orWithdrawn(err, r.Seq)
		t.carryOn(b, at, true)
		b.maybeSend(t)
	})
}

// noRun is a Lookup's answer for a chain no lower tier holds the start of.
var noRun = []messages.Tier{}

// demandChain is what a sequence asked of the tiers below that neither
// pinned memory nor the disk held: the block indexes in the sequence and
// the hashes of those blocks; held is the tokens its allocation got from
// the cache (GPU hits and loads).
type demandChain struct {
	w      *waiter // the allocation's: a load of a freed sequence's owner is not a new one's
	at     []int
	hashes []uint64
	held   int
}

// noteDemand keeps, with Config.ReportDemand, the blocks the allocation w
// waits for (sequence w.seq, just given held tokens from the cache) looked
// up below (k's hashes after the first gpuAt) and found neither in pinned
// memory nor on disk, by the index's answer run: the engine computes them, or the shared tier
// serves them. The index hears of them (messages.Demand) and tells the disk
// of those misses when they come to be: at the sequence's first commit past
// held tokens (sendDemand), or for blocks the shared tier served, when they
// land on the GPU (demandLanded). Until then the request may still be freed
// unused and tried again (a scheduler keeping its order, a tensor-parallel
// group whose other rank had no room), and its misses must count once.
func (t *Tier) noteDemand(w *waiter, k *blockpool.Keys, gpuAt int, run []messages.Tier, held int) {
	if !t.cfg.ReportDemand {
		return
	}
	d := demandChain{w: w}
	for j := gpuAt; j < len(k.Hashes); j++ {
		if i := j - gpuAt; i < len(run) && (run[i] == messages.Pinned || run[i] == messages.Disk) {
			continue
		}
		d.at = append(d.at, j)
		d.hashes = append(d.hashes, uint64(k.Hashes[j]))
	}
	if len(d.at) > 0 {
		d.held = held
		t.demand[w.seq] = d
	}
}

// sendDemand passes seq's kept blocks, if any, to the index once a commit
// of tokens goes past what the cache gave the sequence: the engine computed
// it. A commit refused only because the sequence's loads are in flight
// (ErrNotReady) counts too: an engine that computes without waiting for
// them (best effort) says so that way, and may free the sequence before
// any commit is accepted.
func (t *Tier) sendDemand(seq blockpool.SeqID, tokens int) {
	d, ok := t.demand[seq]
	if !ok {
		return
	}
	n, err := t.pool.NumTokens(seq)
	if tokens == blockpool.AllTokens {
		tokens = n
	}
	if err != nil || tokens > n || tokens <= d.held {
		return // a commit past the sequence's end computed nothing it holds
	}
	delete(t.demand, seq)
	t.demandOut(d.hashes)
}

// demandLanded passes on the kept blocks in [from, to) of the allocation w
// waits for, which a load from the shared tier just made valid on the GPU:
// a retry of the request would hit them there and never report them. The
// allocation may have been freed meanwhile (its blocks are still cached:
// orphans).
func (t *Tier) demandLanded(w *waiter, from, to int) {
	d, ok := t.demand[w.seq]
	orphan := !ok || d.w != w
	if orphan {
		if d, ok = t.orphans[w]; !ok {
			return
		}
	}
	var out []uint64
	keep := 0
	for i, j := range d.at {
		if j >= from && j < to {
			out = append(out, d.hashes[i])
			continue
		}
		d.at[keep], d.hashes[keep] = j, d.hashes[i]
		keep++
	}
	if len(out) == 0 {
		return
	}
	d.at, d.hashes = d.at[:keep], d.hashes[:keep]
	switch {
	case orphan && keep == 0:
		delete(t.orphans, w)
	case orphan:
		t.orphans[w] = d
	case keep == 0:
		delete(t.demand, w.seq)
	default:
		t.demand[w.seq] = d
	}
	t.demandOut(out)
}

// demandShort lowers what the cache gave the allocation w waits for to
// tokens when one of its loads falls short: the engine computes the blocks
// it gave up, and a commit past tokens reports its misses.
func (t *Tier) demandShort(w *waiter, tokens int) {
	if d, ok := t.demand[w.seq]; ok && d.w == w && tokens < d.held {
		d.held = tokens
		t.demand[w.seq] = d
	}
}

// demandFreed drops what seq, freed before it was computed, kept; blocks of
// the shared tier its loads still in flight bring up stay cached, and are
// reported when they land (orphans, until its loads are over).
func (t *Tier) demandFreed(seq blockpool.SeqID) {
	d, ok := t.demand[seq]
	if !ok {
		return
	}
	delete(t.demand, seq)
	if d.w.pending > 0 {
		t.orphans[d.w] = d
	}
}

// demandOut adds hashes to this Ready's Demand.
func (t *Tier) demandOut(hashes []uint64) {
	if t.demandMsg == nil {
		t.demandMsg = &messages.Demand{}
		t.toIndex(t.demandMsg)
	}
	t.demandMsg.Hashes = append(t.demandMsg.Hashes, hashes...)
}

// loadDeadline is the instant a load of tokens tokens for r must finish by,
// and whether there is one: r's LoadDeadline, else the configured budget.
func (t *Tier) loadDeadline(r *messages.AllocRequest, tokens int) (time.Time, bool) {
	if !r.LoadDeadline.IsZero() {
		return r.LoadDeadline, true
	}
	if t.cfg.ReadPerToken > 0 || t.cfg.ReadBase > 0 {
		return t.now.Add(t.cfg.ReadBase + time.Duration(tokens)*t.cfg.ReadPerToken), true
	}
	return time.Time{}, false
}

// pinnedRun is the length of the leading run of load that pinned memory
// holds, when blocks of another tier follow it; 0 otherwise.
func pinnedRun(load []messages.Tier) int {
	n := 0
	for n < len(load) && load[n] == messages.Pinned {
		n++
	}
	if n == len(load) {
		return 0
	}
	return n
}

// launchFetch arms op's timer and asks the tier below for its blocks, after
// the write-down of the contents they evicted (evictOp) when there is one.
func (t *Tier) launchFetch(op *fetchOp, evictOp *offloadOp) {
	if op.late {
		// Given up already: behind a load that fell short before it was
		// asked for (see settleNext); no timer was armed.
		op.timed = false
		t.endFetch(op)
		return
	}
	if t.pastDeadline(op) {
		// Already late (a LoadDeadline in the past): a miss now, and
		// nothing asked of the tiers below.
		op.timed = false
		t.fetchLate(op.id)
		t.endFetch(op)
		return
	}
	if op.timed {
		t.timer(op.id, op.deadline)
	}
	req := &messages.FetchRequest{ID: op.id, Hashes: op.hashes, Digests: op.digests, Deadline: op.askBy}
	if evictOp == nil {
		t.sendFetch(req)
		return
	}
	// The loads land in blocks whose old bytes are still being copied
	// out; a load late by then asks nothing below.
	evictOp.then = append(evictOp.then, func() {
		if op.late {
			t.endFetch(op)
			return
		}
		t.sendFetch(req)
	})
}

// parkedReq is a parked allocation or append: retry runs it again, cancel
// answers it with err (nil: ErrCanceled, its caller withdrew) without
// applying it; call is its request's.
type parkedReq struct {
	retry  func()
	cancel func(err error)
	call   *messages.Call
}

// parkReq parks a part of the request being applied, or cancels it at once
// when its caller has withdrawn already.
func (t *Tier) parkReq(retry func(), cancel func(error)) {
	if t.call.Withdrawn() {
		cancel(nil)
		return
	}
	t.parked = append(t.parked, parkedReq{retry: retry, cancel: cancel, call: t.call})
}

// orWithdrawn is err, or when nil the error of a part its caller withdrew.
func orWithdrawn(err error, seq uint64) error {
	if err != nil {
		return err
	}
	return fmt.Errorf("%w: sequence %d waited for blocks until its caller gave up", messages.ErrCanceled, seq)
}

// SetCall names the Call of the request the next events apply (nil: none),
// so that a part of it that parks can be withdrawn (Withdraw).
func (t *Tier) SetCall(c *messages.Call) { t.call = c }

// Withdraw answers, with ErrCanceled, the parked parts of requests whose
// Call was withdrawn: they changed nothing, and their callers' contexts
// ended. The other parked parts wait on.
func (t *Tier) Withdraw() {
	keep := t.parked[:0]
	var gone []parkedReq
	for _, p := range t.parked {
		if p.call.Withdrawn() {
			gone = append(gone, p)
		} else {
			keep = append(keep, p)
		}
	}
	t.parked = keep
	for _, p := range gone {
		p.cancel(nil)
	}
}

// appendBatch appends and answers once the evicted bytes of any block the
// appends took are copied out, since the caller writes those blocks next.
func (t *Tier) appendBatch(items []messages.AppendItem, send func(*messages.AppendBatchResult)) {
	res := &messages.AppendBatchResult{Errs: make([]error, len(items)), Blocks: make([][]blockpool.BlockID, len(items))}
	w := &waiter{pending: 1, onDone: func() { send(res) }}
	again := repeated(t, items, func(it messages.AppendItem) uint64 { return it.Seq })
	for i, it := range items {
		if again != nil && again[i] {
			res.Errs[i] = repeatedErr(it.Seq)
			continue
		}
		res.Errs[i] = t.appendOne(it, &res.Errs[i], &res.Blocks[i], w)
		t.offloadEvicted(w) // before the taken blocks' flags are reset
		t.resetBlocks(res.Blocks[i])
	}
	w.done(t)
}

// repeated marks the items whose sequence an earlier item of the batch
// names (nil when none does). A batch names each sequence once: its items
// do not all run in order (some wait for the index or for blocks while
// later ones go ahead), so a second item for one sequence could pass the
// first — two appends applied out of order publish a block under tokens
// its KV was not written for.
func repeated[T any](t *Tier, items []T, seq func(T) uint64) []bool {
	if len(items) < 2 {
		return nil
	}
	var out []bool
	seen := t.seenSeqs
	if seen == nil {
		seen = map[uint64]struct{}{}
		t.seenSeqs = seen
	}
	defer clear(seen)
	for i, it := range items {
		s := seq(it)
		if _, dup := seen[s]; dup {
			if out == nil {
				out = make([]bool, len(items))
			}
			out[i] = true
		}
		seen[s] = struct{}{}
	}
	return out
}

func repeatedErr(seq uint64) error {
	return fmt.Errorf("%w: sequence %d named twice in one batch (one item per sequence)", blockpool.ErrBadArgument, seq)
}

// resetBlocks marks blocks just taken for new contents: no copy below, no
// hits. Callers reset them after offloadEvicted, which reads the evicted
// contents' flags to skip what is written down already.
func (t *Tier) resetBlocks(ids []blockpool.BlockID) {
	for _, id := range ids {
		t.unclaim(id)
		t.flags[id], t.hits[id], t.class[id] = 0, 0, 0
	}
}

// setSeqClass records seq's class (AllocRequest.Class), which its commits
// give the blocks they publish first.
func (t *Tier) setSeqClass(seq blockpool.SeqID, c uint8) {
	if c == 0 {
		delete(t.seqClass, seq)
		return
	}
	t.seqClass[seq] = c
}

// reclassify gives seq class c (CommitItem.Class): its later commits
// publish with it, and every block its commits published first takes it —
// those of its table and those an earlier allocation of it left cached (its
// claim list) — a copy already below keeps the class it went down with; a
// later write-down carries this one.
func (t *Tier) reclassify(seq blockpool.SeqID, c uint8) {
	t.seqClass[seq], t.classed[seq] = c, true
	id, ok := t.claimHead[seq]
	if !ok {
		return
	}
	for ; id != noBlock; id = t.claimNext[id] {
		t.class[id] = c
	}
}

// disown ends the claims of seq, which a commit gave a class and which is
// being freed (see Tier.publisher): on the blocks of its table and on those
// an earlier allocation of it published and left behind.
func (t *Tier) disown(seq blockpool.SeqID) {
	if !t.classed[seq] {
		return
	}
	delete(t.classed, seq)
	id, ok := t.claimHead[seq]
	if !ok {
		return
	}
	// The whole list goes: no neighbour to relink, and one map operation
	// rather than one a block (unclaim of each head in turn).
	delete(t.claimHead, seq)
	for id != noBlock {
		t.flags[id] &^= flagPublished
		id = t.claimNext[id]
	}
}

// noBlock ends a sequence's list of claimed blocks (claimNext, claimPrev).
const noBlock blockpool.BlockID = -1

// claim records that a commit of seq published blocks ids first: they go
// at the head of seq's list, read and written once for them all (a map
// lookup and store a block cost about as much as the rest of the commit).
func (t *Tier) claim(ids []blockpool.BlockID, seq blockpool.SeqID) {
	if len(ids) == 0 {
		return
	}
	for _, id := range ids { // before the head is read: an unclaim may move it
		t.unclaim(id)
	}
	next, ok := t.claimHead[seq]
	if !ok {
		next = noBlock
	}
	for _, id := range ids {
		t.publisher[id], t.claimPrev[id], t.claimNext[id] = seq, noBlock, next
		if next != noBlock {
			t.claimPrev[next] = id
		}
		t.flags[id] |= flagPublished
		next = id
	}
	t.claimHead[seq] = next
}

// unclaim ends the claim of id's publisher on it, if any.
func (t *Tier) unclaim(id blockpool.BlockID) {
	if t.flags[id]&flagPublished == 0 {
		return
	}
	t.flags[id] &^= flagPublished
	prev, next := t.claimPrev[id], t.claimNext[id]
	if next != noBlock {
		t.claimPrev[next] = prev
	}
	switch {
	case prev != noBlock:
		t.claimNext[prev] = next
	case next != noBlock:
		t.claimHead[t.publisher[id]] = next
	default:
		delete(t.claimHead, t.publisher[id])
	}
}

// appendOne appends it, parking it (w waits) while offloads ahead of need pin
// the blocks it needs. The blocks it took go to *took.
func (t *Tier) appendOne(it messages.AppendItem, errp *error, took *[]blockpool.BlockID, w *waiter) error {
	seq := blockpool.SeqID(it.Seq)
	ids, err := t.pool.AppendTokens(seq, it.Tokens, it.Lookahead, nil)
	// The blocks the append took start with no copy below and no hits: the
	// caller resets them (resetBlocks) after offloadEvicted.
	if t.parkable(err) {
		w.pending++
		t.parkReq(func() {
			*errp = t.appendOne(it, errp, took, w)
			t.offloadEvicted(w)
			t.resetBlocks(*took)
			w.done(t)
		}, func(err error) {
			*errp = orWithdrawn(err, it.Seq)
			w.done(t)
		})
		return *errp // nil while parked; withdrawnErr if cancelled at once
	}
	*took = ids
	return err
}

// commitBatch commits what the caller computed. Under IngestAll the blocks a
// commit makes findable are written through at once.
func (t *Tier) commitBatch(items []messages.CommitItem) *messages.CommitBatchResult {
	res := &messages.CommitBatchResult{Errs: make([]error, len(items))}
	published := t.scratch[:0]
	for i, it := range items {
		seq := blockpool.SeqID(it.Seq)
		if t.notReady[seq] != nil {
			res.Errs[i] = fmt.Errorf("%w: sequence %d", ErrNotReady, it.Seq)
			t.sendDemand(seq, it.Tokens)
			continue
		}
		var was, now int
		from := len(published)
		published, was, now, res.Errs[i] = t.pool.CommitSpan(seq, it.Tokens, published)
		// The blocks this commit published first are the sequence's: a
		// duplicate of a block published already is not among them and
		// keeps its publisher and class.
		c := t.seqClass[seq]
		for _, id := range published[from:] {
			t.class[id] = c
		}
		t.claim(published[from:], seq)
		if res.Errs[i] == nil {
			if it.Class != 0 {
				t.reclassify(seq, it.Class)
			}
			t.sendDemand(seq, it.Tokens)
			t.fenceWritten(seq, was, now, it.After)
			// Judged done or not at the free only: a CUDAFence's first
			// Done starts a goroutine that waits for it on the host.
			switch {
			case it.After != nil:
				t.lastFence[seq] = it.After
			case now > was:
				// KV written past what the pass of the fence kept
				// covered: the engine says its work is done. A commit
				// that covers nothing new (a repeat of the count) says
				// nothing of the pass still in flight, and keeps it.
				delete(t.lastFence, seq)
			}
		}
	}
	t.scratch = published[:0]
	if t.cfg.Ingestion == IngestAll {
		t.offloadResident(published)
	}
	return res
}

// fenceWritten records after, the fence of the work a commit of seq just
// covered, on every block that work wrote: those past the was tokens
// committed before, up to the now committed, the partial block included.
// Copies that read a published block down wait on it; so does a copy up
// into any of them once they are freed and taken again (a sequence
// preempted or aborted while its pass runs): without the wait the pass's
// write could land after the loaded bytes, in a block the load publishes.
func (t *Tier) fenceWritten(seq blockpool.SeqID, was, now int, after gpu.Fence) {
	if now <= was {
		return
	}
	ids, err := t.pool.TableRange(t.scratchIDs[:0], seq, was/t.bs, t.blocksFor(now))
	if err != nil {
		return
	}
	for _, id := range ids {
		t.fence[id] = after
	}
	t.scratchIDs = ids[:0]
}

// freedReaders passes the fence of seq's last commit, while not done, to
// every block of seq, which is being freed: the engine's work behind it may
// still read them, and a load must not overwrite them before it has.
func (t *Tier) freedReaders(seq blockpool.SeqID) {
	f, ok := t.lastFence[seq]
	if !ok {
		return
	}
	delete(t.lastFence, seq)
	if gpu.FenceDone(f) {
		return
	}
	ids, err := t.pool.Table(t.scratchIDs[:0], seq)
	if err != nil {
		return
	}
	for _, id := range ids {
		fs := t.readFences[id]
		if n := len(fs); n > 0 && sameFence(fs[n-1], f) {
			continue // freed in the same pass as the sequence before
		}
		// Swept of done fences when touched, so a list holds no more than
		// the passes in flight (and those seen done since its last touch).
		t.readFences[id] = addFence(pending(fs), f)
	}
	t.scratchIDs = ids[:0]
}

// addFence appends f to fs unless fs holds it already.
func addFence(fs []gpu.Fence, f gpu.Fence) []gpu.Fence {
	if slices.ContainsFunc(fs, func(x gpu.Fence) bool { return sameFence(x, f) }) {
		return fs
	}
	return append(fs, f)
}

// pending drops the fences seen done from fs, in place.
func pending(fs []gpu.Fence) []gpu.Fence {
	return slices.DeleteFunc(fs, gpu.FenceDone)
}

// parkable says whether err is a lack of blocks that offloads ahead of need
// will end: the blocks their copies pin come free when the copies are out.
func (t *Tier) parkable(err error) bool {
	if err == nil {
		return false
	}
	var ns *blockpool.NoSpaceError
	if !errors.As(err, &ns) {
		return false
	}
	releasable := 0
	count := func(op *offloadOp) {
		if op.evict {
			return
		}
		for _, id := range op.blocks {
			if t.pool.RefCount(id) == t.pool.Pinned(id) {
				releasable++
			}
		}
	}
	for _, op := range t.offload {
		count(op)
	}
	for _, q := range t.serialQueue { // their copies come, in turn
		if q.op != nil {
			count(q.op)
		}
	}
	return releasable > 0 && ns.Needed <= ns.Free+releasable
}

// retryParked runs the parked requests again, in order.
func (t *Tier) retryParked() {
	list := t.parked
	t.parked = nil
	prev := t.call
	for _, p := range list {
		if p.call.Withdrawn() {
			p.cancel(nil)
			continue
		}
		t.call = p.call // parked again, it stays its request's
		p.retry()
	}
	t.call = prev
}

// sealedBlocks appends seq's committed blocks not yet written down. Blocks
// never committed (a prefill cut short, an abort) hold no KV worth keeping and
// are left out.
func (t *Tier) sealedBlocks(dst []blockpool.BlockID, seq blockpool.SeqID) []blockpool.BlockID {
	table, err := t.pool.Table(nil, seq)
	if err != nil {
		return dst
	}
	for _, id := range table {
		if _, cached := t.pool.BlockHash(id); cached && t.flags[id]&(flagBelow|flagMoving) == 0 {
			dst = append(dst, id)
		}
	}
	return dst
}

// freeBatch frees seqs; with swap their committed blocks that have no copy
// below yet are written down first.
func (t *Tier) freeBatch(seqs []uint64, swap bool, send func(*messages.FreeBatchResult)) {
	res := &messages.FreeBatchResult{Errs: make([]error, len(seqs))}
	var all []blockpool.BlockID
	for i, s := range seqs {
		if swap { // IngestAll wrote committed blocks through at commit
			all = t.sealedBlocks(all, blockpool.SeqID(s))
		}
		t.freedReaders(blockpool.SeqID(s))
		t.disown(blockpool.SeqID(s))
		res.Errs[i] = t.pool.Deallocate(blockpool.SeqID(s))
		if res.Errs[i] == nil {
			delete(t.notReady, blockpool.SeqID(s)) // its loads end as the old sequence's
			delete(t.seqClass, blockpool.SeqID(s))
			t.demandFreed(blockpool.SeqID(s))
		}
	}
	t.offloadResident(all)
	t.reply(func() { send(res) })
}

// step runs one scheduler step in one message: commits, frees, then appends,
// then allocations, answering once all are decided.
func (t *Tier) step(m *messages.StepBatch) {
	res := &messages.StepResult{Commit: t.commitBatch(m.Commit), Free: &messages.FreeBatchResult{}, Append: &messages.AppendBatchResult{}}
	parts := 1 // the allocations, always answered through the Ready's replies
	done := func() {
		if parts--; parts == 0 {
			m.Reply <- res
		}
	}
	// Parts with nothing to do answer nothing: a step of a scheduler often
	// has no appends, or no frees, and their bookkeeping is most of a small
	// step's allocations.
	if len(m.Free) > 0 {
		parts++
		t.freeBatch(m.Free, false /* swap */, func(r *messages.FreeBatchResult) { res.Free = r; done() })
	}
	if len(m.Append) > 0 {
		parts++
		t.appendBatch(m.Append, func(r *messages.AppendBatchResult) { res.Append = r; done() })
	}
	if !t.allocateBatch(m.Allocate, m.Keys, m.AllocateInOrder, func(r *messages.AllocateBatchResult) { res.Allocate = r; done() }) {
		t.afterBatch()
	}
}

// afterBatch offloads free cached blocks ahead of need when the GPU holds data in
// more than OffloadThreshold of its blocks: those among the OffloadAhead next
// to be evicted that are not below yet. The window is bounded, not the
// blocks written per batch: a block written ahead stays on the GPU, and may
// be hit there again, until it is evicted, and meanwhile its copy holds a
// slot below that a block the GPU no longer has could use.
func (t *Tier) afterBatch() {
	if !t.lower() || t.cfg.Ingestion != IngestEvict || t.cfg.OffloadAhead <= 0 {
		return
	}
	st := t.pool.Stats()
	if float64(st.Used+st.FreeCached) < t.cfg.OffloadThreshold*float64(st.NumBlocks) {
		return
	}
	var ids []blockpool.BlockID
	seen := 0
	t.pool.FreeCached(func(id blockpool.BlockID, _ prefixhash.Hash) bool {
		if t.flags[id]&(flagBelow|flagMoving) == 0 {
			ids = append(ids, id)
		}
		seen++
		return seen < t.cfg.OffloadAhead
	})
	t.offloadResident(ids)
}

// blocksFor is the number of blocks tokens tokens take.
func (t *Tier) blocksFor(tokens int) int { return (tokens + t.bs - 1) / t.bs }
