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

// Ingestion says when GPU blocks are written down to pinned memory (AIBrix's L2
// ingestion policies); see messages.Ingestion.
type Ingestion = messages.Ingestion

// The ingestion policies.
const (
	IngestEvict = messages.IngestEvict
	IngestAll   = messages.IngestAll
	IngestHot   = messages.IngestHot
)

// ErrTooLong rejects a prompt longer than the request's MaxSeqLen when it may
// not be truncated.
var ErrTooLong = errors.New("kvtier: sequence longer than MaxSeqLen")

// ErrStopped answers work still waiting when the tier stops.
var ErrStopped = fmt.Errorf("kvtier: gpu tier: %w", messages.ErrStopped)

// ErrLowerGone aborts the pinned slots of an offer granted after LowerGone
// gave it up.
var ErrLowerGone = errors.New("kvtier: gpu tier: the tiers below are out of service")

// ErrNotReady rejects a commit for a sequence whose Ready has not completed:
// its blocks may still be loading. A caller that computed past what the
// cache gave it without waiting (best effort) is still taken at its word
// for the misses it computed (Config.ReportDemand).
var ErrNotReady = errors.New("kvtier: commit before the allocation's Ready completed")

// Config configures a Tier. The Tier owns Pool from now on.
type Config struct {
	Pool *blockpool.Pool
	// BlockBytes is the size of one block in the arena (for Stats).
	BlockBytes int
	// Lower says a pinned tier (and the prefix index) lie below: offloads
	// and loads are planned only then.
	Lower bool

	Ingestion        Ingestion
	HotHits          int
	OffloadThreshold float64 // fraction of blocks holding data above which free cached blocks are offloaded ahead of need
	OffloadAhead     int     // window of free blocks, from the next to be evicted, written down ahead of need
	// SerialOffloads keeps one offload in flight: the next, and loads'
	// FetchRequests, wait until the pinned tier has the last one's
	// OffloadDone, so the pinned tier sees commits, grants and reads in the
	// same order on every run.
	SerialOffloads bool

	// Double get: ask the lower tiers only when they hold at least
	// DoubleGetMinBlocks blocks of the chain and that is at least
	// DoubleGetMinRatio of the prompt's blocks.
	DoubleGetMinBlocks int
	DoubleGetMinRatio  float64
	// ReportDemand: the blocks a sequence looked up below and found
	// neither in pinned memory nor on disk go to the index
	// (messages.Demand) once the engine computed them (its first commit
	// past what the cache gave it) or the shared tier's copies of them
	// landed; the index tells a disk that learns from misses. Off, nothing
	// is kept or sent.
	ReportDemand bool

	// A load from a lower tier must finish within ReadBase + tokens*ReadPerToken
	// on the Tier's clock; a late load becomes a miss. Zero ReadPerToken and
	// ReadBase: no deadline.
	ReadBase, ReadPerToken time.Duration

	// Namespaces are the tenant salts whose token counts Stats reports
	// apart (TierStats.Tokens); every other salt counts as "other".
	Namespaces []string

	Log *zap.Logger
}

const (
	flagBelow     uint8 = 1 << iota // a copy of the block's contents is in pinned memory
	flagMoving                      // an offload of the block is in flight
	flagPublished                   // publisher names the sequence whose commit published the block
)

// Tier is the GPU tier's state machine. See the package doc.
type Tier struct {
	cfg  Config
	pool *blockpool.Pool
	bs   int
	now  time.Time
	out  Ready
	// spareReplies is the Replies memory Ready hands out next (see Ready).
	spareReplies []Reply
	flags        []uint8
	hits         []uint16
	// class holds, per block, the class (AllocRequest.Class, or a later
	// commit's CommitItem.Class) of the sequence whose commit first
	// published the block's contents, for the
	// tiers below to hand their eviction policies (BlockChain.Class); 0
	// when unknown (loaded from below, or of a sequence with no class).
	// Reset with flags when a block is taken for new contents.
	class []uint8
	// publisher holds, per block with flagPublished, the sequence whose
	// commit published it first: a class the sequence's later commit gives
	// (CommitItem.Class) reaches it (reclassify), under this allocation or
	// a later one of the same sequence (readmitted after a preemption, with
	// the block in its table again or left cached outside it).
	// A sequence freed after a commit gave it a class has finished: its
	// claims end with the free (disown), so a request that reuses its id
	// gives its class to its own blocks only.
	publisher []blockpool.SeqID
	// classed holds the sequences a commit gave a class (reclassify),
	// until their free.
	classed map[blockpool.SeqID]bool
	// claimHead, claimNext and claimPrev link, per sequence, the blocks
	// whose flagPublished names it (publisher): those of its table and
	// those an earlier allocation of it left behind (preempted, readmitted
	// without them), so that disown ends every claim of a finished
	// sequence. resetBlocks ends a block's claim; a sequence's entry lives
	// while it claims a block (at most one entry a block).
	claimHead            map[blockpool.SeqID]blockpool.BlockID
	claimNext, claimPrev []blockpool.BlockID
	// seqClass is, per sequence allocated with a class, that class: a
	// reallocation of the same sequence sets it again, a commit with a
	// class replaces it, a free drops it.
	seqClass map[blockpool.SeqID]uint8
	// fence holds, per block, the fence of the last commit that covered
	// tokens of it (fenceWritten): every copy that reads the block down,
	// and every copy up into it after it was freed and taken again, waits
	// on it. Cleared once seen done.
	fence []gpu.Fence
	// lastFence is, per sequence, the fence of its last commit while not
	// seen done: the engine's work on it. Freed, its blocks get it in
	// readFences, which holds per block the fences of the work of freed
	// sequences that may still read it (attention over their prefix): a
	// copy up into the block waits on them too. A list is swept of done
	// fences whenever it is touched. Indexed by block, as fence is: a
	// free walks the whole table of the sequence, and a map's hashing
	// made that free of a long sequence ten times as slow.
	lastFence  map[blockpool.SeqID]gpu.Fence
	readFences [][]gpu.Fence
	nextID     uint64
	lookups    map[uint64]*pendingAlloc
	// demand holds, per sequence allocated after a Lookup and not yet
	// computed, the blocks it looked up that neither pinned memory nor the
	// disk held (noteDemand); demandMsg is the message in out.ToIndex that
	// gathers, until the next Ready, those reported since.
	demand    map[blockpool.SeqID]demandChain
	orphans   map[*waiter]demandChain // of freed sequences whose loads are in flight (demandFreed)
	demandMsg *messages.Demand
	fetches   map[uint64]*fetchOp
	// Moving averages of a copy up's time (ns) on the stream and of its
	// blocks (noteCopyUp; 0 blocks: none measured yet), for copyUpPerBlock.
	copyUpTime, copyUpBlocks float64
	lastCopyDone             time.Time
	// The smoothed mean and mean deviation of how long after the deadline
	// it was given a read cut there reaches the tier (noteAnswerLag), for
	// answerLag; answerLagTimed once a late answer was measured.
	lagMean, lagDev time.Duration
	answerLagTimed  bool
	offload         map[uint64]*offloadOp
	// serialQueue holds offloads waiting for the one in flight
	// (Config.SerialOffloads), each with the id it was given when started.
	serialQueue []queuedOffload
	flushes     []gpuFlush
	// parked are allocations and appends short of blocks only because offloads
	// ahead of need pin them; they retry as those copies finish, or end with
	// ErrCanceled when their caller withdraws (Withdraw).
	parked []parkedReq
	// call is the Call of the request being applied (SetCall), which the
	// parts it parks keep.
	call    *messages.Call
	stats   messages.TierStats
	tokens  map[string]*messages.TokenCounts // by namespace label, bounded by Config.Namespaces
	evicted []blockpool.Evicted
	// For the event stream (the pool's Journal on): evictWrites counts,
	// by hash, the writes down of evicted blocks in flight; while one is,
	// Ready holds back the GPU's removals of the hash (held), reported once
	// the last of them ended (ResidencyAfter, behind its OffloadDone) if
	// no block serves the hash again by then. So a block is stored below
	// before it is gone from the GPU, even when a second write of it found
	// the first still filling its slot.
	evictWrites map[uint64]int
	held        map[uint64]bool
	scratch     []blockpool.BlockID
	scratchIDs  []blockpool.BlockID // fenceWritten's, apart from scratch (commitBatch's)
	// notReady is, per sequence, the allocation whose loads from lower
	// tiers have not completed: commits wait for them, since a finishing
	// load publishes its blocks. Freeing the sequence forgets it, so a new
	// allocation under the same id does not wait for the old one's loads.
	notReady map[blockpool.SeqID]*waiter
	stopped  bool
	// seenSeqs is repeated's scratch, empty between calls.
	seenSeqs map[uint64]struct{}
}

// New returns a Tier over cfg.Pool.
func New(cfg Config) *Tier {
	n := cfg.Pool.Config().NumBlocks
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	return &Tier{
		cfg: cfg, pool: cfg.Pool, bs: cfg.Pool.Config().BlockSize,
		flags: make([]uint8, n), class: make([]uint8, n), publisher: make([]blockpool.SeqID, n), claimNext: make([]blockpool.BlockID, n), claimPrev: make([]blockpool.BlockID, n), hits: make([]uint16, n), fence: make([]gpu.Fence, n), readFences: make([][]gpu.Fence, n),
		lookups: map[uint64]*pendingAlloc{}, demand: map[blockpool.SeqID]demandChain{}, orphans: map[*waiter]demandChain{}, fetches: map[uint64]*fetchOp{}, offload: map[uint64]*offloadOp{},
		notReady: map[blockpool.SeqID]*waiter{}, lastFence: map[blockpool.SeqID]gpu.Fence{}, seqClass: map[blockpool.SeqID]uint8{}, classed: map[blockpool.SeqID]bool{}, claimHead: map[blockpool.SeqID]blockpool.BlockID{}, evictWrites: map[uint64]int{}, held: map[uint64]bool{},
		stats: messages.TierStats{Tier: messages.GPU},
	}
}

// waiter gathers what one allocation waits on before its Completion fires.
type waiter struct {
	seq     blockpool.SeqID
	c       messages.Completion // an allocation's Ready, held in the waiter (unused with onDone)
	onDone  func()              // instead of c, for a batch reply that waits
	pending int
	loading bool // blocks are loading from a lower tier: commits wait
	out     messages.OnboardOutcome
}

// done ends one thing w waits on; the last queues its answer.
func (w *waiter) done(t *Tier) {
	w.pending--
	if w.pending > 0 {
		return
	}
	if w.loading {
		w.loading = false
		if t.notReady[w.seq] == w {
			delete(t.notReady, w.seq)
		}
	}
	delete(t.orphans, w) // its loads are over
	t.out.Replies = append(t.out.Replies, w)
}

// Reply answers w's caller.
func (w *waiter) Reply() {
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

func (t *Tier) lower() bool { return t.cfg.Lower }

func (t *Tier) newID() uint64 {
	t.nextID++
	return t.nextID
}

func (t *Tier) query(m *messages.Query) *messages.QueryResult {
	res := &messages.QueryResult{}
	hits, err := t.pool.CachedBlocks(m.Tokens, m.Keys)
	if err != nil {
		res.Err = err
		return res
	}
	res.Tokens[messages.GPU.Index()] = hits * t.bs
	if m.Kind == messages.QueryDelete {
		res.Deleted = t.deleteChain(m.Tokens, m.Keys)
	}
	return res
}

// deleteChain makes the chain's blocks unfindable: cached ones, held or not
// (their holders keep using them; they are never cached again), and blocks
// loads in flight are filling, which become a miss for their sequence instead
// of being published. Offloads of the chain in flight land below, where the
// lower tiers' own delete drops them; offloads still queued behind another
// (Config.SerialOffloads) would land after it, so they lose the chain's
// blocks here. It returns the cached blocks dropped.
func (t *Tier) deleteChain(tokens []int64, k *blockpool.Keys) int {
	// Verified as a hit is: a forged hash collision deletes nothing.
	ids, _ := t.pool.CachedChain(nil, tokens, k)
	for _, id := range ids {
		t.pool.Uncache(id)
		t.flags[id] &^= flagBelow
		t.hits[id] = 0
	}
	n := len(ids)
	if len(t.fetches)+len(t.serialQueue) == 0 || len(k.Digests) != len(k.Hashes) {
		return n // copies in flight need a tier below, which needs digests
	}
	chain := make(map[uint64]prefixhash.Digest, len(k.Hashes))
	for i, h := range k.Hashes {
		chain[uint64(h)] = k.Digests[i]
	}
	t.dropQueuedOffloads(chain)
	for _, op := range t.fetches {
		for j, h := range op.hashes {
			if d, ok := chain[h]; ok && d == op.digests[j] && (!op.deleted || j < op.keep) {
				op.deleted, op.keep = true, j
				break
			}
		}
	}
	return n
}

func (t *Tier) maybeFlushed() {
	if len(t.flushes) == 0 {
		return
	}
	oldest := t.nextID + 1 // the oldest operation still in flight
	for id := range t.lookups {
		oldest = min(oldest, id)
	}
	for id := range t.fetches {
		oldest = min(oldest, id)
	}
	for id := range t.offload {
		oldest = min(oldest, id)
	}
	for _, q := range t.serialQueue {
		if q.op != nil {
			oldest = min(oldest, q.id)
		}
	}
	keep := t.flushes[:0]
	for _, f := range t.flushes {
		if f.upto < oldest {
			t.reply(func() { f.reply <- nil })
		} else {
			keep = append(keep, f)
		}
	}
	t.flushes = keep
}

// Stop ends everything a caller may still wait on: allocations waiting for a
// lookup get ErrStopped, pending loads complete as failed misses, waiting
// appends answer, flushes get ErrStopped. A waiter whose blocks a copy still
// touches is answered only after that copy: Ready.Stopped lists them with
// the copies they wait for, which the executor waits for off the state
// machine. The Tier takes no event after Stop.
func (t *Tier) Stop() { t.stop(ErrStopped) }

// Fail stops the tier as Stop does, answering with err instead of
// ErrStopped: for an owner that failed half-way through an event. The
// output that event had staged (copies, messages, replies) is dropped
// first: it cannot be trusted; only what the stop answers goes out.
func (t *Tier) Fail(err error) {
	t.out, t.demandMsg = Ready{}, nil
	t.stop(err)
}

func (t *Tier) stop(err error) {
	t.stopped = true
	parked := t.parked // answered with err, applied never
	t.parked = nil
	for _, p := range parked {
		p.cancel(err)
	}
	for _, p := range t.lookups {
		for _, i := range p.waiting {
			p.b.res.Results[i].Err = err
		}
		if p.ord != nil { // every request waited, none was applied
			for i := range p.b.res.Results {
				if r := &p.b.res.Results[i]; r.Err == nil {
					r.Err = err
				}
			}
		}
		p.b.ready = true
		p.b.maybeSend(t)
	}
	t.lookups = map[uint64]*pendingAlloc{}
	waits := map[*waiter][]CopyID{}
	t.notReady = map[blockpool.SeqID]*waiter{}
	for id, op := range t.fetches {
		t.out.CancelTimers = append(t.out.CancelTimers, id)
		if !op.late {
			op.w.out.Failed += len(op.blocks)
			waits[op.w] = append(waits[op.w], CopyID{ID: id, Fetch: true})
		}
	}
	t.fetches = map[uint64]*fetchOp{}
	for id, op := range t.offload {
		for _, w := range op.waiters {
			waits[w] = append(waits[w], CopyID{ID: id})
		}
	}
	t.offload = map[uint64]*offloadOp{}
	for _, q := range t.serialQueue { // never started: no copy touches their blocks
		if q.op == nil {
			continue // a load's request: answered with t.fetches above
		}
		for _, w := range q.op.waiters {
			if _, ok := waits[w]; !ok {
				waits[w] = nil
			}
		}
	}
	t.serialQueue = nil
	for w, ids := range waits {
		w.loading = false
		t.out.Stopped = append(t.out.Stopped, StoppedWait{Copies: ids, Complete: w.Reply})
	}
	for _, f := range t.flushes {
		t.reply(func() { f.reply <- err })
	}
	t.flushes = nil
}

// Stats returns the tier's counters and occupancy.
func (t *Tier) Stats() messages.TierStats {
	s := t.stats
	ps := t.pool.Stats()
	s.Blocks = ps.NumBlocks
	s.UsedBlocks = ps.Used + ps.FreeCached
	s.BytesUsed = int64(s.UsedBlocks) * int64(t.cfg.BlockBytes)
	s.InFlight = len(t.offload) + len(t.fetches)
	for _, q := range t.serialQueue {
		if q.op != nil {
			s.InFlight++
		}
	}
	s.Extra = map[string]float64{"free": float64(ps.Free), "free_cached": float64(ps.FreeCached), "sequences": float64(ps.Sequences), "revived": float64(ps.Revived),
		"copy_up_us_per_block": float64(t.copyUpPerBlock()) / float64(time.Microsecond), "answer_lag_us": float64(t.answerLag()) / float64(time.Microsecond)}
	s.Tokens = make(map[string]messages.TokenCounts, len(t.tokens))
	for ns, c := range t.tokens {
		s.Tokens[ns] = *c
	}
	return s
}

// CheckPool runs the owned pool's invariant walk; for the invariants build and tests.
func (t *Tier) CheckPool() error { return t.pool.CheckInvariants() }

// OtherNamespace labels the token counts of salts Config.Namespaces does not
// name.
const OtherNamespace = "other"

// DefaultNamespace labels the token counts of requests with no salt.
const DefaultNamespace = "default"

// countTokens adds an allocation's tokens under its namespace label.
func (t *Tier) countTokens(salt string, n int, out *messages.AllocResult) {
	label := OtherNamespace
	switch {
	case salt == "":
		label = DefaultNamespace
	case slices.Contains(t.cfg.Namespaces, salt):
		label = salt
	}
	if t.tokens == nil {
		t.tokens = make(map[string]*messages.TokenCounts)
	}
	c := t.tokens[label]
	if c == nil {
		c = &messages.TokenCounts{}
		t.tokens[label] = c
	}
	c.Add(n, out)
}
