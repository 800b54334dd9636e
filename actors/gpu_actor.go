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

// ErrNotReady rejects a commit for a sequence whose Ready has not completed:
// its blocks may still be loading, and the caller has computed nothing yet.
var ErrNotReady = errors.New("kvtier: commit before the allocation's Ready completed")

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
	cfg   GPUConfig
	pool  *blockpool.Pool
	bs    int
	flags []uint8
	hits  []uint16
	// fence holds, per block, the fence its last commit named: every copy
	// that reads the block down waits on it. Cleared once seen done.
	fence   []gpu.Fence
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
	// notReady counts, per sequence, allocations whose loads from lower
	// tiers have not completed: commits wait for them, since a finishing
	// load publishes its blocks.
	notReady map[blockpool.SeqID]int
}

// NewGPUActor returns the actor's producer.
func NewGPUActor(cfg GPUConfig) actor.Producer {
	return func() actor.Actor {
		n := cfg.Pool.Config().NumBlocks
		return &GPUActor{
			cfg: cfg, pool: cfg.Pool, bs: cfg.Pool.Config().BlockSize,
			flags: make([]uint8, n), hits: make([]uint16, n), fence: make([]gpu.Fence, n),
			lookups: map[uint64]*pendingAlloc{}, fetches: map[uint64]*fetchOp{}, offload: map[uint64]*offloadOp{},
			notReady: map[blockpool.SeqID]int{},
			stats:    messages.TierStats{Tier: messages.GPU},
		}
	}
}

// waiter gathers what one allocation waits on before its Completion fires.
type waiter struct {
	seq     blockpool.SeqID
	c       *messages.Completion
	onDone  func() // instead of c, for a batch reply that waits
	pending int
	loading bool // blocks are loading from a lower tier: commits wait
	out     messages.OnboardOutcome
}

func (w *waiter) done(a *GPUActor) {
	w.pending--
	if w.pending > 0 {
		return
	}
	if w.loading {
		if a.notReady[w.seq]--; a.notReady[w.seq] <= 0 {
			delete(a.notReady, w.seq)
		}
	}
	if w.onDone != nil {
		w.onDone()
	} else {
		w.c.Complete(w.out)
	}
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
		if !m.Take() {
			return // the caller gave up before it took effect
		}
		if !a.allocateBatch(ctx, m.Reqs, m.Keys, func(r *messages.AllocateBatchResult) { m.Reply <- r }) {
			a.afterBatch(ctx)
		}
	case *messages.StepBatch:
		if m.Take() {
			a.step(ctx, m)
		}
	case *messages.CommitBatch:
		if m.Take() {
			m.Reply <- a.commitBatch(ctx, m.Items)
		}
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
		if m.Take() {
			a.appendBatch(ctx, m.Items, func(r *messages.AppendBatchResult) { m.Reply <- r })
			a.afterBatch(ctx)
		}
	case *messages.FreeBatch:
		if m.Take() {
			a.freeBatch(ctx, m.Seqs, m.Swap, func(r *messages.FreeBatchResult) { m.Reply <- r })
			a.afterBatch(ctx)
		}
	case *messages.Query:
		if m.Take() {
			m.Reply <- a.query(m)
		}
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

func (a *GPUActor) query(m *messages.Query) *messages.QueryResult {
	res := &messages.QueryResult{}
	hits, err := a.pool.CachedBlocks(m.Tokens, m.Keys)
	if err != nil {
		res.Err = err
		return res
	}
	res.GPUTokens = hits * a.bs
	if m.Kind == messages.QueryDelete {
		res.Deleted = a.deleteChain(m.Keys)
	}
	return res
}

// deleteChain makes the chain's blocks unfindable: cached ones, held or not
// (their holders keep using them; they are never cached again), and blocks
// loads in flight are filling, which become a miss for their sequence instead
// of being published. Offloads of the chain in flight land below, where the
// lower tiers' own delete drops them. It returns the cached blocks dropped.
func (a *GPUActor) deleteChain(k *blockpool.Keys) int {
	n := 0
	for i, h := range k.Hashes {
		id, ok := a.pool.Lookup(h)
		if d, _ := a.pool.BlockDigest(id); ok && d == k.Digests[i] {
			a.pool.Uncache(id)
			a.flags[id] &^= flagBelow
			a.hits[id] = 0
			n++
		}
	}
	if len(a.fetches) == 0 {
		return n
	}
	chain := make(map[uint64]prefixhash.Digest, len(k.Hashes))
	for i, h := range k.Hashes {
		chain[uint64(h)] = k.Digests[i]
	}
	for _, op := range a.fetches {
		for j, h := range op.hashes {
			if d, ok := chain[h]; ok && d == op.digests[j] && (!op.deleted || j < op.keep) {
				op.deleted, op.keep = true, j
				break
			}
		}
	}
	return n
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
	// Waiters finish on goroutines below: none may touch actor state.
	a.notReady = map[blockpool.SeqID]int{}
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
		w.loading = false
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
