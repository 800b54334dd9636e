package actors

import (
	"errors"
	"fmt"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/prefixhash"
)

// Ingestion says when GPU blocks are written down to pinned memory (AIBrix's L2
// ingestion policies).
type Ingestion int

const (
	// IngestEvict writes a cached block down when it is about to be reused, and
	// ahead of need once the GPU is fuller than the offload threshold.
	IngestEvict Ingestion = iota + 1
	// IngestAll writes every full, hashed block through once its sequence has
	// moved past it (Append) or ended (Free).
	IngestAll
	// IngestHot writes a block down once it has been hit HotHits times.
	IngestHot
)

func (i Ingestion) String() string {
	switch i {
	case IngestEvict:
		return "evict"
	case IngestAll:
		return "all"
	case IngestHot:
		return "hot"
	}
	return fmt.Sprintf("Ingestion(%d)", int(i))
}

// ErrTooLong rejects a prompt longer than the request's MaxSeqLen when it may
// not be truncated.
var ErrTooLong = errors.New("kvtier: sequence longer than MaxSeqLen")

// ErrStopped answers work still waiting when a tier actor stops.
var ErrStopped = errors.New("kvtier: tier actor stopped")

// GPUConfig configures the GPU pool actor. The actor owns Pool, Arena and Stream.
type GPUConfig struct {
	Pool   *blockpool.Pool
	Arena  gpu.Arena
	Stream gpu.Stream
	// Pinned and Index are nil for a GPU-only manager.
	Pinned, Index *actor.PID

	Ingestion        Ingestion
	HotHits          int
	OffloadThreshold float64 // fraction of blocks holding data above which free cached blocks are offloaded ahead of need
	OffloadAhead     int     // blocks offloaded ahead of need per batch

	// Double get: ask the lower tiers only when they hold at least
	// DoubleGetMinBlocks blocks of the chain and that is at least
	// DoubleGetMinRatio of the prompt's blocks.
	DoubleGetMinBlocks int
	DoubleGetMinRatio  float64

	// A load from a lower tier must finish within ReadBase + tokens*ReadPerToken;
	// a late load becomes a miss. Zero ReadPerToken and ReadBase: no deadline.
	ReadBase, ReadPerToken time.Duration

	Log *zap.Logger
}

const (
	flagBelow  uint8 = 1 << iota // a copy of the block's contents is in pinned memory
	flagMoving                   // an offload of the block is in flight
)

// GPUActor owns the GPU block pool and device arena. See the package doc.
type GPUActor struct {
	cfg     GPUConfig
	pool    *blockpool.Pool
	bs      int
	flags   []uint8
	hits    []uint16
	hasher  prefixhash.Hasher
	nextID  uint64
	lookups map[uint64]*pendingAlloc
	fetches map[uint64]*fetchOp
	offload map[uint64]*offloadOp
	flushes []gpuFlush
	// parked are allocations and appends short of blocks only because offloads
	// ahead of need pin them; they retry as those copies finish.
	parked  []func(actor.Context)
	stats   messages.TierStats
	evicted []blockpool.Evicted
	scratch []blockpool.BlockID
}

// NewGPUActor returns the actor's producer.
func NewGPUActor(cfg GPUConfig) actor.Producer {
	return func() actor.Actor {
		n := cfg.Pool.Config().NumBlocks
		return &GPUActor{
			cfg: cfg, pool: cfg.Pool, bs: cfg.Pool.Config().BlockSize,
			flags: make([]uint8, n), hits: make([]uint16, n),
			lookups: map[uint64]*pendingAlloc{}, fetches: map[uint64]*fetchOp{}, offload: map[uint64]*offloadOp{},
			stats: messages.TierStats{Tier: messages.GPU},
		}
	}
}

// waiter gathers what one allocation waits on before its Completion fires.
type waiter struct {
	seq     blockpool.SeqID
	c       *messages.Completion
	onDone  func() // instead of c, for a batch reply that waits
	pending int
	out     messages.OnboardOutcome
}

func (w *waiter) done(a *GPUActor) {
	w.pending--
	if w.pending > 0 {
		return
	}
	if w.onDone != nil {
		w.onDone()
	} else {
		w.c.Complete(w.out)
	}
}

type pendingAlloc struct {
	reqs    []messages.AllocRequest
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

// fetchOp is one onboarding: blocks [first, first+len(blocks)) of a sequence.
type fetchOp struct {
	w      *waiter
	first  int
	blocks []blockpool.BlockID
	hashes []uint64
	slots  []int
	late   bool
	copied bool
	timer  *time.Timer
	ev     *gpu.Event // the copy, once enqueued
}

// offloadOp writes blocks down; waiters are allocations that reuse evicted
// blocks and must not write them before the copy is out.
type offloadOp struct {
	blocks  []blockpool.BlockID
	items   []messages.OffloadItem
	evict   bool // the blocks were evicted: their flags are not theirs any more
	waiters []*waiter
	// then runs once the copy is enqueued (or found unnecessary): a load into
	// the same blocks is enqueued after it, so stream order puts it behind.
	then   []func(actor.Context)
	slots  []int
	hashes []uint64
	ev     *gpu.Event // the copy, once enqueued
}

// gpuFlush waits for the operations with ids up to upto (those in flight when the
// Flush arrived, and the ones they started), not for later ones.
type gpuFlush struct {
	reply chan error
	upto  uint64
}

// copyDone reports a finished copy batch to the actor.
type copyDone struct {
	id    uint64
	fetch bool
	err   error
}

type fetchTimeout struct{ id uint64 }

// Receive implements actor.Actor.
func (a *GPUActor) Receive(ctx actor.Context) {
	if invariantsEnabled {
		defer func() { mustHold(a.checkGPU()) }()
	}
	switch m := ctx.Message().(type) {
	case *messages.AllocateBatch:
		if !a.allocateBatch(ctx, m.Reqs, func(r *messages.AllocateBatchResult) { m.Reply <- r }) {
			a.afterBatch(ctx)
		}
	case *messages.StepBatch:
		a.step(ctx, m)
	case *messages.LookupResult:
		a.lookupDone(ctx, m)
	case *messages.FetchGrant:
		a.fetchGranted(ctx, m)
	case *messages.OffloadGrant:
		a.offloadGranted(ctx, m)
	case *copyDone:
		if m.fetch {
			a.fetchCopied(ctx, m)
		} else {
			a.offloadCopied(ctx, m)
		}
	case *fetchTimeout:
		a.fetchLate(ctx, m.id)
	case *messages.AppendBatch:
		a.appendBatch(ctx, m.Items, func(r *messages.AppendBatchResult) { m.Reply <- r })
		a.afterBatch(ctx)
	case *messages.FreeBatch:
		a.freeBatch(ctx, m.Seqs, func(r *messages.FreeBatchResult) { m.Reply <- r })
		a.afterBatch(ctx)
	case *messages.Query:
		m.Reply <- a.query(m)
	case *messages.Flush:
		a.flushes = append(a.flushes, gpuFlush{reply: m.Reply, upto: a.nextID})
		a.maybeFlushed()
	case *messages.StatsRequest:
		m.Reply <- a.snapshot()
	case *actor.Started, *actor.Stopping, *actor.Restarting:
	case *actor.Stopped:
		a.stopped()
	default:
		a.cfg.Log.Warn("gpu actor: unexpected message", zap.String("type", typeName(m)))
	}
}

func (a *GPUActor) lower() bool { return a.cfg.Pinned != nil }

func (a *GPUActor) newID() uint64 {
	a.nextID++
	return a.nextID
}

// allocateBatch allocates what needs no lower tier at once and asks the index
// about the rest, in one Lookup for the whole batch.
// It reports whether allocations wait for the index: the caller then leaves the
// offload ahead of need to lookupDone, as it would pin blocks they are about to take.
func (a *GPUActor) allocateBatch(ctx actor.Context, reqs []messages.AllocRequest, send func(*messages.AllocateBatchResult)) (waiting bool) {
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
		if !a.lower() || len(r.Tokens) < a.bs {
			a.allocate(ctx, r, out, 0, nil, b)
			continue
		}
		hits, hashes := a.pool.CachedPrefix(nil, r.Tokens, r.Salt)
		if hits == len(hashes) {
			a.allocate(ctx, r, out, 0, nil, b)
			continue
		}
		if pend == nil {
			pend = &pendingAlloc{reqs: reqs, b: b}
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
		a.allocate(ctx, r, &pend.b.res.Results[i], pend.gpu[k], m.Tiers[k], pend.b)
	}
	a.afterBatch(ctx)
	pend.b.ready = true
	pend.b.maybeSend()
}

// allocate allocates one request; below lists the tiers of the blocks after the
// first gpuAt blocks that lower tiers hold.
func (a *GPUActor) allocate(ctx actor.Context, r *messages.AllocRequest, out *messages.AllocResult, gpuAt int, below []messages.Tier, b *batchReply) {
	nb := (len(r.Tokens) + a.bs - 1) / a.bs
	if len(below) > 0 && (len(below) < a.cfg.DoubleGetMinBlocks || float64(len(below)) < a.cfg.DoubleGetMinRatio*float64(nb)) {
		a.stats.DoubleGetSkips += uint64(len(below))
		below = nil
	}
	alloc, err := a.pool.Allocate(blockpool.SeqID(r.Seq), r.Tokens, r.Salt)
	if a.parkable(err) {
		b.parked++
		a.parked = append(a.parked, func(ctx actor.Context) {
			b.parked--
			a.allocate(ctx, r, out, gpuAt, below, b)
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
			h, _ := a.pool.BlockHash(id)
			a.pool.Uncache(id) // not findable until its bytes arrive
			a.pool.Pin(id)
			op.blocks = append(op.blocks, id)
			op.hashes = append(op.hashes, uint64(h))
			if load[j] == messages.Disk {
				out.DiskTokens += a.bs
			} else {
				out.PinnedTokens += a.bs
			}
		}
		w.pending++
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
		req := &messages.FetchRequest{ID: id, Hashes: op.hashes, Deadline: deadline}
		if evictOp != nil {
			// The loads land in blocks whose old bytes are still being copied out.
			evictOp.then = append(evictOp.then, func(ctx actor.Context) { ctx.Request(a.cfg.Pinned, req) })
		} else {
			ctx.Request(a.cfg.Pinned, req)
		}
	}
	w.done(a)
}

// offloadEvicted writes down evicted blocks whose contents are nowhere below yet;
// w (the allocation that reuses them) waits for the copy.
// It returns the offload, or nil when nothing needs copying.
func (a *GPUActor) offloadEvicted(ctx actor.Context, w *waiter) *offloadOp {
	a.evicted = a.pool.DrainEvicted(a.evicted[:0])
	if len(a.evicted) == 0 {
		return nil
	}
	a.stats.Evictions += uint64(len(a.evicted))
	if !a.lower() || a.cfg.Ingestion != IngestEvict {
		return nil
	}
	op := &offloadOp{evict: true}
	for _, e := range a.evicted {
		if a.flags[e.Block]&flagBelow != 0 {
			continue // already written down
		}
		op.blocks = append(op.blocks, e.Block)
		op.items = append(op.items, messages.OffloadItem{Hash: uint64(e.Hash), Tokens: a.bs})
	}
	if len(op.blocks) == 0 {
		return nil
	}
	op.waiters = append(op.waiters, w)
	w.pending++
	a.startOffload(ctx, op)
	return op
}

// offloadResident writes down blocks still in the pool (free cached or held),
// pinning them for the copy.
func (a *GPUActor) offloadResident(ctx actor.Context, ids []blockpool.BlockID) {
	if !a.lower() || len(ids) == 0 {
		return
	}
	op := &offloadOp{}
	for _, id := range ids {
		h, cached := a.pool.BlockHash(id)
		if !cached || a.flags[id]&(flagBelow|flagMoving) != 0 {
			continue
		}
		a.pool.Pin(id)
		a.flags[id] |= flagMoving
		op.blocks = append(op.blocks, id)
		op.items = append(op.items, messages.OffloadItem{Hash: uint64(h), Tokens: a.bs})
	}
	if len(op.blocks) > 0 {
		a.startOffload(ctx, op)
	}
}

func (a *GPUActor) startOffload(ctx actor.Context, op *offloadOp) {
	if op.evict {
		for _, id := range op.blocks {
			a.pool.Pin(id)
		}
	}
	id := a.newID()
	a.offload[id] = op
	ctx.Request(a.cfg.Pinned, &messages.OffloadRequest{ID: id, Items: op.items})
}

// offloadGranted starts the device-to-host copy of the granted blocks.
func (a *GPUActor) offloadGranted(ctx actor.Context, g *messages.OffloadGrant) {
	op, ok := a.offload[g.ID]
	if !ok {
		a.cfg.Log.Error("gpu actor: grant for an unknown offload", zap.Uint64("id", g.ID))
		return
	}
	var ops []gpu.CopyOp
	keep := op.blocks[:0]
	for i, slot := range g.Slots {
		id := op.blocks[i]
		switch slot {
		case messages.SlotDenied:
			a.stats.Denied++
			a.releaseOffloadBlock(op, id, false)
		case messages.SlotExists:
			a.releaseOffloadBlock(op, id, true)
		default:
			ops = append(ops, gpu.CopyOp{Block: int(id), Host: g.Bytes[i]})
			op.slots = append(op.slots, slot)
			op.hashes = append(op.hashes, op.items[i].Hash)
			keep = append(keep, id)
		}
	}
	op.blocks = keep
	if len(ops) > 0 {
		op.ev = a.startCopy(ctx, g.ID, false, gpu.D2H, ops)
	}
	for _, f := range op.then {
		f(ctx)
	}
	op.then = nil
	if len(ops) == 0 {
		a.finishOffload(ctx, g.ID, op)
	}
}

// startCopy enqueues a batch on the stream and reports its completion by message.
func (a *GPUActor) startCopy(ctx actor.Context, id uint64, fetch bool, dir gpu.Direction, ops []gpu.CopyOp) *gpu.Event {
	var ev *gpu.Event
	var err error
	if dir == gpu.D2H {
		ev, err = a.cfg.Stream.CopyD2H(ops)
	} else {
		ev, err = a.cfg.Stream.CopyH2D(ops)
	}
	self, sys := ctx.Self(), ctx.ActorSystem()
	if err != nil {
		sys.Root.Send(self, &copyDone{id: id, fetch: fetch, err: err})
		return nil
	}
	go func() {
		<-ev.Done()
		sys.Root.Send(self, &copyDone{id: id, fetch: fetch, err: ev.Err()})
	}()
	return ev
}

func (a *GPUActor) offloadCopied(ctx actor.Context, m *copyDone) {
	op, ok := a.offload[m.id]
	if !ok {
		a.cfg.Log.Error("gpu actor: copy done for an unknown offload", zap.Uint64("id", m.id))
		return
	}
	ctx.Send(a.cfg.Pinned, &messages.OffloadDone{Slots: op.slots, Hashes: op.hashes, Err: m.err})
	if m.err != nil {
		a.stats.Failed += uint64(len(op.blocks))
		a.cfg.Log.Warn("gpu actor: offload copy failed", zap.Error(m.err))
	} else {
		a.stats.Offloaded += uint64(len(op.blocks))
	}
	for _, id := range op.blocks {
		a.releaseOffloadBlock(op, id, m.err == nil)
	}
	a.finishOffload(ctx, m.id, op)
}

// releaseOffloadBlock ends a block's part in an offload: flags (for blocks that
// still hold what was copied) and the copy's pin.
func (a *GPUActor) releaseOffloadBlock(op *offloadOp, id blockpool.BlockID, below bool) {
	if !op.evict {
		a.flags[id] &^= flagMoving
		if below {
			a.flags[id] |= flagBelow
		}
	}
	a.pool.Unpin(id)
}

func (a *GPUActor) finishOffload(ctx actor.Context, id uint64, op *offloadOp) {
	delete(a.offload, id)
	for _, w := range op.waiters {
		w.done(a)
	}
	if !op.evict && len(a.parked) > 0 {
		a.retryParked(ctx)
	}
	a.maybeFlushed()
}

// fetchGranted copies the granted leading run up; the rest of the op missed.
func (a *GPUActor) fetchGranted(ctx actor.Context, g *messages.FetchGrant) {
	op, ok := a.fetches[g.ID]
	if !ok || op.late {
		// The load already timed out: give the references straight back.
		ctx.Send(a.cfg.Pinned, &messages.FetchRelease{Slots: g.Slots})
		if ok {
			for _, id := range op.blocks {
				a.pool.Unpin(id)
			}
			a.endFetch(g.ID, op)
		}
		return
	}
	op.slots = g.Slots
	if n := len(g.Slots); n < len(op.blocks) {
		a.missFrom(op, n, false)
	}
	if len(g.Slots) == 0 {
		a.endFetch(g.ID, op)
		op.w.done(a)
		return
	}
	ops := make([]gpu.CopyOp, len(g.Slots))
	for i := range ops {
		ops[i] = gpu.CopyOp{Block: int(op.blocks[i]), Host: g.Bytes[i]}
	}
	op.ev = a.startCopy(ctx, g.ID, true, gpu.H2D, ops)
}

// missFrom gives up on op's blocks from index n on: they stay the sequence's,
// uncached, to be recomputed.
func (a *GPUActor) missFrom(op *fetchOp, n int, failed bool) {
	for _, id := range op.blocks[n:] {
		a.pool.Unpin(id)
	}
	if failed {
		op.w.out.Failed += len(op.blocks) - n
		a.stats.Failed += uint64(len(op.blocks) - n)
	}
	op.blocks, op.hashes = op.blocks[:n], op.hashes[:n]
}

func (a *GPUActor) fetchCopied(ctx actor.Context, m *copyDone) {
	op, ok := a.fetches[m.id]
	if !ok {
		a.cfg.Log.Error("gpu actor: copy done for an unknown fetch", zap.Uint64("id", m.id))
		return
	}
	ctx.Send(a.cfg.Pinned, &messages.FetchRelease{Slots: op.slots})
	op.copied = true
	if op.late {
		// The sequence moved on to fresh blocks; the late copy's blocks go back.
		for _, id := range op.blocks {
			a.pool.Unpin(id)
		}
		a.endFetch(m.id, op)
		return
	}
	if m.err != nil {
		a.cfg.Log.Warn("gpu actor: onboard copy failed", zap.Error(m.err))
		a.missFrom(op, 0, true)
	} else {
		for _, id := range op.blocks {
			a.pool.Recache(id)
			a.flags[id] |= flagBelow
			a.pool.Unpin(id)
		}
		a.stats.Onboarded += uint64(len(op.blocks))
		op.w.out.ValidTokens = (op.first + len(op.blocks)) * a.bs
	}
	a.endFetch(m.id, op)
	op.w.done(a)
}

// fetchLate turns a load that missed its deadline into a miss: the sequence gets
// fresh blocks to recompute into while the copy finishes into the old ones.
func (a *GPUActor) fetchLate(ctx actor.Context, id uint64) {
	op, ok := a.fetches[id]
	if !ok || op.copied || op.late {
		return
	}
	if a.pool.NumFree() < len(op.blocks) {
		return // no blocks to swap in: the load finishes late rather than fail
	}
	op.late = true
	table, err := a.pool.Table(nil, op.w.seq)
	if err == nil {
		for i, old := range op.blocks {
			if op.first+i < len(table) && table[op.first+i] == old {
				if fresh, err := a.pool.Detach(op.w.seq, op.first+i); err == nil {
					table[op.first+i] = fresh
					a.flags[fresh], a.hits[fresh] = 0, 0
				}
			}
		}
		op.w.out.Blocks = table
	}
	op.w.out.Late += len(op.blocks)
	a.stats.Timeouts += uint64(len(op.blocks))
	// The fresh blocks may have evicted cached contents: those leave before the
	// caller is told to write.
	a.offloadEvicted(ctx, op.w)
	op.w.done(a)
}

func (a *GPUActor) endFetch(id uint64, op *fetchOp) {
	if op.timer != nil {
		op.timer.Stop()
	}
	delete(a.fetches, id)
	a.maybeFlushed()
}

// appendBatch appends and answers once the evicted bytes of any block the
// appends took are copied out, since the caller writes those blocks next.
func (a *GPUActor) appendBatch(ctx actor.Context, items []messages.AppendItem, send func(*messages.AppendBatchResult)) {
	res := &messages.AppendBatchResult{Errs: make([]error, len(items))}
	w := &waiter{pending: 1, onDone: func() { send(res) }}
	var all []blockpool.BlockID
	for i, it := range items {
		res.Errs[i] = a.appendOne(ctx, it, &res.Errs[i], w)
		a.offloadEvicted(ctx, w)
		if res.Errs[i] == nil && a.cfg.Ingestion == IngestAll {
			all = a.sealedBlocks(all, blockpool.SeqID(it.Seq), true)
		}
	}
	a.offloadResident(ctx, all)
	w.done(a)
}

// appendOne appends it, parking it (w waits) while offloads ahead of need pin
// the blocks it needs.
func (a *GPUActor) appendOne(ctx actor.Context, it messages.AppendItem, errp *error, w *waiter) error {
	seq := blockpool.SeqID(it.Seq)
	before, _ := a.pool.Table(a.scratch[:0], seq)
	n0 := len(before)
	err := a.pool.AppendTokens(seq, it.Tokens)
	if err == nil {
		// Blocks the append took start with no copy below and no hits.
		after, _ := a.pool.Table(before[:0], seq)
		for _, id := range after[n0:] {
			a.flags[id], a.hits[id] = 0, 0
		}
		a.scratch = after
	}
	if a.parkable(err) {
		w.pending++
		a.parked = append(a.parked, func(ctx actor.Context) {
			*errp = a.appendOne(ctx, it, errp, w)
			a.offloadEvicted(ctx, w)
			w.done(a)
		})
		return nil
	}
	return err
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

// sealedBlocks appends seq's full, cached blocks not yet written down; with
// skipLast the last block (still being written) is left out.
func (a *GPUActor) sealedBlocks(dst []blockpool.BlockID, seq blockpool.SeqID, skipLast bool) []blockpool.BlockID {
	table, err := a.pool.Table(nil, seq)
	if err != nil {
		return dst
	}
	if skipLast && len(table) > 0 {
		table = table[:len(table)-1]
	}
	for _, id := range table {
		if _, cached := a.pool.BlockHash(id); cached && a.flags[id]&(flagBelow|flagMoving) == 0 {
			dst = append(dst, id)
		}
	}
	return dst
}

func (a *GPUActor) freeBatch(ctx actor.Context, seqs []uint64, send func(*messages.FreeBatchResult)) {
	res := &messages.FreeBatchResult{Errs: make([]error, len(seqs))}
	var all []blockpool.BlockID
	for i, s := range seqs {
		if a.cfg.Ingestion == IngestAll {
			all = a.sealedBlocks(all, blockpool.SeqID(s), false)
		}
		res.Errs[i] = a.pool.Deallocate(blockpool.SeqID(s))
	}
	a.offloadResident(ctx, all)
	send(res)
}

// step runs one scheduler step in one message: frees, then appends, then
// allocations, answering once all three are decided.
func (a *GPUActor) step(ctx actor.Context, m *messages.StepBatch) {
	res := &messages.StepResult{}
	parts := 3
	done := func() {
		if parts--; parts == 0 {
			m.Reply <- res
		}
	}
	a.freeBatch(ctx, m.Free, func(r *messages.FreeBatchResult) { res.Free = r; done() })
	a.appendBatch(ctx, m.Append, func(r *messages.AppendBatchResult) { res.Append = r; done() })
	if !a.allocateBatch(ctx, m.Allocate, func(r *messages.AllocateBatchResult) { res.Allocate = r; done() }) {
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

func (a *GPUActor) query(m *messages.Query) *messages.QueryResult {
	res := &messages.QueryResult{}
	hits, hashes := a.pool.CachedPrefix(nil, m.Tokens, m.Salt)
	res.GPUTokens = hits * a.bs
	if m.Kind == messages.QueryDelete {
		for _, h := range hashes {
			if id, ok := a.pool.Lookup(h); ok && a.pool.RefCount(id) == 0 {
				a.pool.Uncache(id)
				a.flags[id] = 0
				res.Deleted++
			}
		}
	}
	return res
}

func (a *GPUActor) maybeFlushed() {
	if len(a.flushes) == 0 {
		return
	}
	oldest := a.nextID + 1 // the oldest operation still in flight
	for id := range a.lookups {
		oldest = min(oldest, id)
	}
	for id := range a.fetches {
		oldest = min(oldest, id)
	}
	for id := range a.offload {
		oldest = min(oldest, id)
	}
	keep := a.flushes[:0]
	for _, f := range a.flushes {
		if f.upto < oldest {
			f.reply <- nil
		} else {
			keep = append(keep, f)
		}
	}
	a.flushes = keep
}

// stopped ends everything a caller may still wait on: allocations waiting for
// a lookup get ErrStopped, pending loads complete as failed misses, waiting
// appends answer, flushes get ErrStopped. Copies still on the stream finish
// into memory the Manager frees only after draining the stream.
func (a *GPUActor) stopped() {
	for _, p := range a.lookups {
		for _, i := range p.waiting {
			p.b.res.Results[i].Err = ErrStopped
		}
		p.b.ready = true
		p.b.maybeSend()
	}
	a.lookups = map[uint64]*pendingAlloc{}
	// A waiter completes once every copy it waits on has left the stream, so
	// no caller writes a block a copy still touches.
	waits := map[*waiter][]*gpu.Event{}
	for _, op := range a.fetches {
		if op.timer != nil {
			op.timer.Stop()
		}
		if !op.late {
			op.w.out.Failed += len(op.blocks)
			waits[op.w] = append(waits[op.w], op.ev)
		}
	}
	a.fetches = map[uint64]*fetchOp{}
	for _, op := range a.offload {
		for _, w := range op.waiters {
			waits[w] = append(waits[w], op.ev)
		}
	}
	a.offload = map[uint64]*offloadOp{}
	for w, evs := range waits {
		go func() {
			for _, ev := range evs {
				if ev != nil {
					<-ev.Done()
				}
			}
			w.pending = len(evs)
			for range evs {
				w.done(a)
			}
		}()
	}
	for _, f := range a.flushes {
		f.reply <- ErrStopped
	}
	a.flushes = nil
}

func (a *GPUActor) snapshot() messages.TierStats {
	s := a.stats
	ps := a.pool.Stats()
	s.Blocks = ps.NumBlocks
	s.UsedBlocks = ps.Used + ps.FreeCached
	s.BytesUsed = int64(s.UsedBlocks) * int64(a.cfg.Arena.BlockBytes())
	s.InFlight = len(a.offload) + len(a.fetches)
	s.Extra = map[string]float64{"free": float64(ps.Free), "free_cached": float64(ps.FreeCached), "sequences": float64(ps.Sequences), "revived": float64(ps.Revived)}
	return s
}

// CheckPool runs the owned pool's invariant walk; for the invariants build and tests.
func (a *GPUActor) CheckPool() error { return a.pool.CheckInvariants() }
