package messages

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kvtier/kvtier/blockpool"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/prefixhash"
)

// Ingestion says when a tier writes its blocks down to the tier below
// (AIBrix's L2 ingestion policies).
type Ingestion int

const (
	// IngestEvict writes a block down when it is about to be evicted (and, on
	// the GPU, ahead of need once the tier is fuller than its threshold).
	IngestEvict Ingestion = iota + 1
	// IngestAll writes every committed block through as soon as it is stored.
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

// ErrStopped answers work still waiting when a tier's actor stops; every
// tier's stop error wraps it. The Manager's ErrClosed is this error.
var ErrStopped = errors.New("kvtier: closed")

// ErrFailed answers the work of an actor that failed (panicked) half-way
// through an event, and every call after it: its owner must be closed.
var ErrFailed = errors.New("kvtier: the GPU actor failed; close the Manager")

// Call is embedded in every request a caller may give up on. The caller and
// the actor race for it once: Take (the actor, before applying the request)
// and Cancel (the caller, when its context ends) — exactly one wins. A
// cancelled request has no effect; a taken one is applied and answered in
// full, so a caller that lost the race waits for the answer.
//
// A taken request may still wait inside the actor: an allocation or append
// short of blocks is parked until offloads in flight free them, and nothing
// of it has taken effect yet. A caller whose context ends then calls
// Withdraw and sends the actor a Withdraw message: the parked parts are
// answered with ErrCanceled, changing nothing, and the rest as they are.
type Call struct {
	state     atomic.Int32
	withdrawn atomic.Bool
}

// ErrCanceled answers a request, or the parked part of one, that its
// caller gave up on before it took effect: nothing changed.
var ErrCanceled = errors.New("kvtier: call canceled before it took effect")

// Withdraw marks the request's parked parts as given up (see Call).
func (c *Call) Withdraw() { c.withdrawn.Store(true) }

// Withdrawn says whether the caller gave up on the request's parked parts.
func (c *Call) Withdrawn() bool { return c != nil && c.withdrawn.Load() }

// Withdraw asks the GPU actor to answer, with ErrCanceled, the parked parts
// of the requests whose Call was withdrawn.
type Withdraw struct{}

// Take claims the request for the actor; false means the caller cancelled it
// and the actor must not apply it.
func (c *Call) Take() bool { return c.state.CompareAndSwap(0, 1) }

// Cancel withdraws the request; false means the actor already took it.
func (c *Call) Cancel() bool { return c.state.CompareAndSwap(0, 2) }

// Tier is a set of storage tiers.
type Tier uint8

const (
	// GPU is device memory (HBM).
	GPU Tier = 1 << iota
	// Pinned is page-locked host memory.
	Pinned
	// Disk is the local disk tier.
	Disk
	// Remote is the shared tier (Redis) many nodes read and write.
	Remote
)

func (t Tier) String() string {
	var parts []string
	for _, x := range []struct {
		t Tier
		n string
	}{{GPU, "gpu"}, {Pinned, "pinned"}, {Disk, "disk"}, {Remote, "remote"}} {
		if t&x.t != 0 {
			parts = append(parts, x.n)
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "+")
}

// AllocRequest asks for a sequence's blocks.
type AllocRequest struct {
	// Seq names the sequence in every later call (Append, Commit, Free,
	// Swap); it must not be held already (ErrSequenceExists) and is free
	// for reuse once the sequence is freed.
	Seq uint64
	// Tokens is the prompt, at least one token (ErrEmptySequence), each in
	// [0, Config.VocabSize) when VocabSize is set (ErrTokenOutOfRange). It
	// is read during the call only (see "Ownership" in package kvtier).
	Tokens []int64
	Salt   string // tenant salt; different salts never share a block
	// LoRA names the adapter the sequence runs with ("" for the base model);
	// different adapters never share a block.
	LoRA string
	// Lookahead adds blocks for this many tokens past Tokens, for the caller
	// to write before it appends their tokens (speculative decoding). A
	// negative Lookahead is refused (ErrBadArgument), one past the GPU's
	// whole capacity gets ErrNoSpace.
	Lookahead int
	// MaxSeqLen, when > 0, bounds the prompt: longer prompts are cut to
	// their first MaxSeqLen tokens when Truncate is set (AllocResult.Truncated
	// says how many went) and denied (ErrTooLong) otherwise.
	// 0 means no bound; a negative MaxSeqLen is refused (ErrBadArgument).
	MaxSeqLen int
	Truncate  bool // see MaxSeqLen
	// MaxHitTokens, when > 0, caps the leading tokens served from any tier
	// (GPU hits plus loads), rounded down to whole blocks; < 0 serves none.
	// Blocks past the cap are fresh, for the caller to compute. A
	// tensor-parallel group uses it so that every rank starts from the
	// hit the group agreed on. len(Tokens)-1 keeps at least one prompt
	// token to compute (for the first output's logits) when the whole
	// prompt is cached, as vLLM does; for a one-token prompt that is 0, no
	// cap: pass -1.
	MaxHitTokens int
	// LoadDeadline, when set, is the instant loads from lower tiers must
	// finish by, in place of the Manager's ReadDeadlineBase/PerToken
	// budget; a load still running then is Late (a miss, fresh blocks). A
	// tensor-parallel group derives it once and passes the same instant to
	// every rank, so a timeout is decided against one clock reading.
	LoadDeadline time.Time
	// Again marks an allocation of a request whose lookup was counted
	// already: the same request freed and allocated again, as a
	// tensor-parallel group reallocates a rank at the group's lower valid
	// prefix. It allocates and loads like any other, but the GPU tier's
	// lookup statistics (TierStats Hits, Misses, DoubleGetSkips and Tokens;
	// kvtier_lookup_tokens_total, kvtier_hit_tokens_total and the GPU's
	// kvtier_tier_hit_blocks_total and _miss_blocks_total) keep what the
	// first allocation found: a request's lookup counts once.
	Again bool
	// Class is the request's class for the lower tiers' eviction policies
	// (policy.Hint.Class), 0 unknown: something the engine knows when it
	// admits the request and that is the request's own, such as
	// policy.OutputClass of its max_tokens, or an application or endpoint
	// tag it maps to 1..255. The blocks this sequence's commits publish
	// first carry it down the tiers (pinned memory, disk), whose policies
	// learn per class how often such blocks are used again
	// (policy.Adaptive); a block published first by another sequence keeps
	// that one's class. An allocation of the same sequence again sets it
	// anew. The GPU's own eviction order ignores it. The class the
	// simulations measured a gain with is the request's output length,
	// known when it finishes: an engine gives that one with the finishing
	// commit (CommitItem.Class), which replaces this one.
	Class uint8
}

// AllocResult answers one AllocRequest.
type AllocResult struct {
	Seq    uint64
	Err    error
	Blocks []blockpool.BlockID // the block table; belongs to the caller
	// Tokens counts the leading tokens each tier serves: the first
	// Tokens.Of(GPU) were on the GPU and are ready now; Tokens.Below() more
	// follow, being copied in from the tiers below, each counted under the
	// tier it comes from.
	Tokens TierTokens
	// Truncated is how many prompt tokens MaxSeqLen cut off.
	Truncated int
	// Ready completes when every copy this allocation waits on is done:
	// onboarding from lower tiers and the offload of evicted blocks whose
	// bytes must leave before the caller writes. Never nil on success.
	Ready *Completion
}

// OnboardOutcome is what a Completion reports.
type OnboardOutcome struct {
	// ValidTokens leading tokens hold valid KV (GPU hits plus what loaded);
	// the caller computes the rest.
	ValidTokens int
	// Blocks, when not nil, replaces the block table of the AllocResult: a late
	// load's blocks were swapped for fresh ones to recompute into.
	Blocks []blockpool.BlockID
	// Why blocks that were loading are not valid: Late missed the deadline;
	// Failed copies or reads failed (corrupt disk records included); Evicted
	// were gone from the lower tier when fetched; Mismatch were found under
	// the hash but failed digest verification (another prefix, namespace or
	// model). ValidTokens plus these blocks' tokens covers what was loading.
	Late, Failed, Evicted, Mismatch int
}

// Completion is a one-shot future set by an actor and read by the caller.
// Its channel is made only when a caller asks for it before the outcome is
// set; most allocations complete before they are answered (GPU hits and
// misses load nothing) and share one closed channel instead.
type Completion struct {
	done atomic.Pointer[chan struct{}]
	out  OnboardOutcome
}

// closed is the Done channel of every Completion set before anyone waited.
var closed = func() *chan struct{} {
	c := make(chan struct{})
	close(c)
	return &c
}()

// NewCompletion returns an incomplete Completion.
func NewCompletion() *Completion { return &Completion{} }

// Done is closed when the outcome is set.
func (c *Completion) Done() <-chan struct{} {
	if p := c.done.Load(); p != nil {
		return *p
	}
	ch := make(chan struct{})
	if c.done.CompareAndSwap(nil, &ch) {
		return ch
	}
	return *c.done.Load() // set meanwhile: closed, or another waiter's
}

// Outcome waits until Done is closed and returns the outcome.
func (c *Completion) Outcome() OnboardOutcome {
	<-c.Done()
	return c.out
}

// Complete sets the outcome. Only the owning actor calls it, once: a
// second call panics.
func (c *Completion) Complete(o OnboardOutcome) {
	c.out = o
	if !c.done.CompareAndSwap(nil, closed) {
		close(*c.done.Load()) // a waiter made the channel first
	}
}

// AllocateBatch carries one scheduler step's allocations.
type AllocateBatch struct {
	Call
	Reqs []AllocRequest
	// Keys[i] are Reqs[i]'s block keys in its namespace, computed by the
	// sender (off the actor's goroutine).
	Keys []*blockpool.Keys
	// InOrder allocates first come, first served: once a request finds no
	// free GPU blocks, the ones after it are not tried (ErrNoSpace).
	InOrder bool
	Reply   chan *AllocateBatchResult
}

// AllocateBatchResult answers AllocateBatch, one result per request in order.
type AllocateBatchResult struct {
	Results []AllocResult
	Err     error
}

// AppendItem adds decoded tokens to one sequence and keeps slots for
// Lookahead more tokens after them.
type AppendItem struct {
	Seq uint64 // a sequence held (ErrUnknownSequence otherwise)
	// Tokens are the decoded tokens, appended all or nothing, each in
	// [0, Config.VocabSize) when VocabSize is set (ErrTokenOutOfRange).
	// None only makes room for Lookahead. Read during the call only.
	Tokens []int64
	// Lookahead makes the block table cover at least this many tokens past
	// the sequence's last: it is not added to an earlier lookahead, and
	// slots already held stay. Negative is refused (ErrBadArgument).
	Lookahead int
}

// AppendBatch carries one decode step.
type AppendBatch struct {
	Call
	Items []AppendItem
	Reply chan *AppendBatchResult
}

// AppendBatchResult has one error (or nil) per item, and the blocks each item
// took (its table's new tail; none when it only filled existing slots).
type AppendBatchResult struct {
	Errs   []error
	Blocks [][]blockpool.BlockID
	Err    error
}

// CommitItem says the first Tokens tokens of sequence Seq hold computed KV.
// With After set, the KV is computed once After is done: the blocks are hits
// at once (the engine's later work on the device runs after its own
// compute), but every copy that reads them to a lower tier waits for the
// fence on the copy stream.
type CommitItem struct {
	Seq uint64 // a sequence held (ErrUnknownSequence otherwise)
	// Tokens is how many leading tokens of the sequence are computed, a
	// total, not an increment: kvtier.AllTokens for every token it holds; more
	// than it holds, or negative otherwise, is ErrBadCommit. A count below
	// what is committed already uncommits nothing.
	Tokens int
	// After, when not nil, is the fence of the pass that computes the KV
	// (see package kvtier's "Contract"); nil: the KV is written already.
	After gpu.Fence
	// Class, when not 0, is the request's class as the engine knows it
	// now (policy.Hint.Class): at its last commit, when it has finished,
	// policy.OutputClass of the tokens it generated. It replaces the class
	// the allocation gave (AllocRequest.Class) from this commit on, and
	// reaches every block a commit of this sequence published first and
	// the GPU still caches, under this allocation or an earlier one of the
	// same sequence (preempted and readmitted, the block held again or
	// left cached outside its table), for its next write-down: the
	// lower tiers' policies then learn what each class's blocks are worth
	// from the request's own class, which is where the simulations measured
	// the gain (cachesim TestReportClassTiming). Once a sequence given a
	// class this way is freed, its claims end: a later request that reuses
	// its id gives its class to the blocks it publishes itself only.
	// Copies already written down (IngestAll, IngestHot, OffloadAhead,
	// Swap) keep the class they went down with: under IngestAll the prompt's
	// blocks go down at their commit, before any finishing class. A commit
	// of no more tokens than were committed (0 will do) sets the class and
	// changes nothing else (but for its After fence, which it records as
	// any commit does); a refused commit sets nothing.
	Class uint8
}

// CommitBatch commits computed tokens of several sequences (one forward pass).
type CommitBatch struct {
	Call
	Items []CommitItem
	Reply chan *CommitBatchResult
}

// CommitBatchResult has one error (or nil) per item.
type CommitBatchResult struct {
	Errs []error
	Err  error
}

// FreeBatch frees finished sequences. With Swap, their full blocks are written
// down to pinned memory first (preemption by swapping).
type FreeBatch struct {
	Call
	Seqs  []uint64
	Swap  bool
	Reply chan *FreeBatchResult
}

// FreeBatchResult has one error (or nil) per sequence.
type FreeBatchResult struct {
	Errs []error
	Err  error
}

// StepBatch carries one scheduler step in one message: the GPU actor commits
// Commit (what the last forward pass computed), frees Free, then appends
// Append, then allocates Allocate.
type StepBatch struct {
	Call
	Commit   []CommitItem
	Free     []uint64
	Append   []AppendItem
	Allocate []AllocRequest
	Keys     []*blockpool.Keys // per Allocate request, as in AllocateBatch
	// AllocateInOrder allocates first come, first served, as
	// AllocateBatch.InOrder.
	AllocateInOrder bool
	Reply           chan *StepResult
}

// StepResult answers StepBatch, part by part.
type StepResult struct {
	Commit   *CommitBatchResult
	Free     *FreeBatchResult
	Append   *AppendBatchResult
	Allocate *AllocateBatchResult
}

// QueryKind selects what a Query does.
type QueryKind int

const (
	// QueryExists reports how many leading tokens each tier holds.
	QueryExists QueryKind = iota + 1
	// QueryDelete drops the chain's cached blocks from every tier.
	QueryDelete
	// QueryPrefetch copies the chain's blocks found below the GPU into pinned memory.
	QueryPrefetch
)

// Query asks about a token chain across tiers.
type Query struct {
	Call
	Kind   QueryKind
	Keys   *blockpool.Keys // the chain's keys in its namespace
	Tokens []int64
	Reply  chan *QueryResult
}

// QueryResult answers a Query, a PinnedQuery or a LowerQuery. For
// QueryExists and QueryPrefetch, the tier that answers sets its own entry of
// Tokens to the leading run of the chain it holds: in tokens from the GPU
// tier, in blocks from the tiers below (the Manager converts). For
// QueryDelete, Deleted counts blocks dropped.
type QueryResult struct {
	Tokens  TierTokens
	Deleted int
	Err     error
}

// Flush is a barrier: answered once every write in flight when it arrived is done.
type Flush struct {
	Reply chan error
}

// StatsRequest asks an actor for its counters.
type StatsRequest struct {
	Reply chan TierStats
}

// TierStats are one tier's counters.
type TierStats struct {
	Tier       Tier
	Blocks     int   // capacity in blocks (slots)
	UsedBlocks int   // blocks holding data or owned by sequences
	BytesUsed  int64 // KV payload bytes of UsedBlocks (Blocks × the block's bytes is the capacity)
	// Hits and Misses count the blocks asked of the tier: found in it, or
	// not served. The pinned tier also serves blocks it reads up from the
	// tiers below: those count in Onboarded (with the blocks it
	// prefetches), neither as hits nor as misses, so its hit ratio among
	// what it was asked is Hits / (Hits + Misses + those served from below).
	Hits, Misses uint64
	Evictions    uint64 // blocks the tier dropped to make room (its policy's victims)
	// Offloaded: for the GPU and pinned tiers, blocks they wrote down to
	// the tier(s) below; for the bottom tiers (disk, remote), blocks
	// written into them — the same copies, seen from below, so a sum over
	// tiers counts each pinned-to-disk write twice (the link counters of
	// LinkObserver count each copy once). The remote tier counts the
	// blocks this node sent: one a peer had stored already is reported
	// written to the tier above but is neither sent nor counted.
	Offloaded uint64
	// Onboarded: blocks the tier copied up from a tier below (GPU,
	// pinned); for the bottom tiers, blocks they served upwards.
	Onboarded      uint64
	Denied         uint64 // writes skipped by the in-flight quota or lack of space
	Timeouts       uint64 // blocks of reads that missed their deadline (became misses)
	Failed         uint64 // copies or I/O that failed (became misses)
	DoubleGetSkips uint64 // lower-tier hits not fetched: below the double-get thresholds
	Mismatches     uint64 // blocks found under their hash whose digest differed (never served)
	// Overdue (the GPU tier): blocks of loads past their deadline that
	// could not become misses at it (their copy up was under way and too
	// few GPU blocks were free to swap in) and so finish late, counted at
	// the deadline: as hits, or as Failed if the copy then fails, or — the
	// later part of a split load whose earlier part fell short — as misses
	// counted under that part's reason (Timeouts for a late one). Ready
	// waits for their copy either way.
	Overdue uint64
	// InFlight is the work under way now, a gauge in each tier's own unit,
	// so compare it over time, not across tiers: the GPU's offload and
	// fetch operations, the pinned tier's blocks being offloaded into it,
	// the disk's block writes, read jobs and copies, the remote tier's
	// requests.
	InFlight int
	// Down says the tier's actor stopped for good after repeated failures
	// (the other fields are then zero): its blocks are no longer served.
	Down bool `json:",omitempty"`
	// Extra holds the tier's own gauges and counters by name (the GPU's
	// "free" and "copy_up_us_per_block", the pinned tier's "locked", the
	// disk's "io_direct", ...).
	Extra map[string]float64 `json:",omitempty"`
	// Tokens (the GPU tier only) is what allocations asked and found, by
	// namespace label: a tenant salt the Manager's MetricsNamespaces names,
	// "default" for requests without a salt, or "other".
	Tokens map[string]TokenCounts `json:",omitempty"`
}

func (s TierStats) String() string {
	return fmt.Sprintf("%s: used %d/%d, hits %d misses %d evictions %d offloaded %d onboarded %d denied %d timeouts %d failed %d",
		s.Tier, s.UsedBlocks, s.Blocks, s.Hits, s.Misses, s.Evictions, s.Offloaded, s.Onboarded, s.Denied, s.Timeouts, s.Failed)
}

// Lookup asks the index which lower tier holds each hash of a chain, for several
// chains at once. Sent by the GPU actor (answered to the sender), and by the
// Manager's Lookup with Reply set (answered there; no Digests: the remote
// tier is not asked). Changes nothing.
type Lookup struct {
	ID     uint64
	Chains [][]uint64
	// Digests are each chain's prefix digests, parallel to Chains: the
	// index asks the shared remote tier, keyed by digest, for the part of
	// a chain no local tier holds.
	Digests [][]prefixhash.Digest
	// Reply, when set, takes the answer instead of the sender; it needs
	// room for one.
	Reply chan *LookupResult
}

// Demand tells the index of blocks requests asked of the tiers below
// (Lookup) that neither pinned memory nor the disk held, once they came to
// be: when the engine computed them (the sequence's first Commit past what
// the cache gave it) or when the shared tier's copy of them landed on the
// GPU. The index tells the disk of them (Missed). A request refused for
// lack of GPU blocks, or given blocks and then freed unused (a scheduler
// keeping its order, a tensor-parallel group whose other rank had no
// room), asks again when it is tried again; counted at its Lookup or its
// allocation, its misses would count once per try. Sent by the GPU actor,
// at most one per Ready, and only when the disk learns from misses
// (gpu/tier Config.ReportDemand); Hashes belongs to the receiver once sent.
type Demand struct {
	Hashes []uint64
}

// RemoteLookup asks the remote tier's actor how many leading blocks of
// each chain (keys by prefix digest) it holds; answered with
// RemoteLookupResult to the sender.
type RemoteLookup struct {
	ID      uint64
	Digests [][]prefixhash.Digest
}

// RemoteLookupResult answers RemoteLookup: Found[i] leading blocks of chain
// i have a commit record (a read may still fail verification: a miss).
type RemoteLookupResult struct {
	ID    uint64
	Found []int
}

// LookupResult answers Lookup: for each chain, the tier of each hash in its
// leading run of hashes held below the GPU (shorter than the chain when a hash is
// missing). Pinned is preferred over Disk when both hold a block.
type LookupResult struct {
	ID    uint64
	Tiers [][]Tier
	// Unanswered: nobody looked (the index restarted, or the tiers below
	// went away, while the Lookup waited); Tiers are empty, and say
	// nothing about what the tiers below hold.
	Unanswered bool
}

// BelowGone tells a tier that no tier below it holds these blocks any more:
// a copy it remembered writing down is gone, so it writes them down again
// when it evicts them. The index sends it to the pinned tier when a hash
// leaves the disk, and to the GPU tier when a hash leaves both pinned memory
// and disk, when the disk lets go of a hash it listed (even while pinned
// memory keeps it listed: maybe for another prefix's block), and for the
// hashes an update names Dropped (IndexUpdate.Dropped). Hashes are a
// candidate's only: the receiver forgets a remembered copy of whatever
// holds the hash, which at worst costs one more write.
type BelowGone struct {
	Hashes []uint64
}

// TiersDown tells the prefix index that this node's tiers below the GPU no
// longer serve: the pinned tier, the staging area of every tier below it,
// stopped after a failure. The index drops every entry of Tiers (announced
// as removals, with BelowGone to the GPU), ignores later additions from
// them, and asks the shared tier no more; lookups then miss below the GPU
// instead of promising blocks no fetch can bring up.
type TiersDown struct {
	Tiers Tier
}

// Missed tells the disk tier which blocks requests came to it for and found
// it without: those neither pinned memory nor the disk held, once computed
// by the engine or served by the shared tier (Demand). The index sends it,
// one per Demand, when the disk's eviction policy learns from misses
// (policy.MissObserver): a block the disk lacks is computed above it, or
// fetched from the shared tier, and reaches it much later, when pinned
// memory lets it go, and what the disk is asked for would otherwise be
// seen only where it hits. Hashes belongs to the receiver once sent.
type Missed struct {
	Hashes []uint64
}

// IndexUpdate tells the index that a tier gained or lost blocks.
type IndexUpdate struct {
	Tier          Tier
	Added, Remove []uint64
	// Dropped are hashes of Remove whose block left every tier below the
	// GPU, though the hash may stay listed for another prefix's block (a
	// forged 64-bit collision; the index tracks hashes, not prefixes):
	// pinned memory dropped a drain the tier below did not report Written.
	// The GPU hears BelowGone for these even when the index still lists the
	// hash below. At worst, for a block the tier below held already (a
	// skipped write), that costs the GPU one more write. Only pinned memory
	// sets it: every removal from a tier after it (the disk, a displaced
	// block included) is taken as dropped (actors.IndexActor, dropsBelow).
	Dropped []uint64
	// Chains, when not nil, is parallel to Added: each added block's chain
	// as the tier recorded it, for the event publisher (the disk's records
	// as it reopens; a tier that says nothing leaves it nil and the
	// publisher fills in what it heard of the blocks before).
	Chains []BlockChain
}

// BlockChain is what a KV event says of a block besides its hash: its
// parent's hash (when HasParent; none for a chain's first block), its
// token ids and its LoRA adapter. Tokens nil means the chain is not known
// (the rest is then meaningless). Its Tokens are read-only once sent and
// may be part of a larger array shared by other blocks' chains.
type BlockChain struct {
	Parent    uint64
	HasParent bool
	Tokens    []int64
	LoRA      string // "" for the base model
	// Class is the class (AllocRequest.Class) of the sequence whose commit
	// first published the block, 0 unknown: metadata for the lower tiers'
	// eviction policies (policy.Hint.Class), never used to serve.
	Class uint8
}

// OffloadItem is one GPU block to write down, with the digest that identifies
// its whole prefix and namespace (stored with the copy, verified on every read).
type OffloadItem struct {
	Hash   uint64
	Digest prefixhash.Digest
	Tokens int
	// Namespace is the block's namespace id (prefixhash.Namespace.ID), and
	// Chain its place in its chain (Tokens nil when the GPU no longer knew
	// it), for the tiers below to record with the copy: a disk reopened
	// after a restart announces its blocks with them. Chain.Tokens are a
	// copy of the pool's, owned by the message.
	Namespace uint64
	Chain     BlockChain
}

// OffloadRequest asks the pinned actor for slots to copy GPU blocks into.
type OffloadRequest struct {
	ID    uint64
	Items []OffloadItem
}

// Grant values for a slot that was not granted.
const (
	SlotDenied = -1 // over the in-flight quota or no space
	SlotExists = -2 // already held in pinned memory
)

// OffloadGrant answers OffloadRequest: Slots[i] is a Filling slot for Items[i],
// or SlotDenied/SlotExists; Bytes[i] is its memory, which the GPU actor's copy
// worker may write until it sends OffloadDone.
type OffloadGrant struct {
	ID    uint64
	Slots []int
	Bytes [][]byte
}

// OffloadDone returns granted slots: committed when Err is nil, else aborted.
type OffloadDone struct {
	Slots  []int
	Hashes []uint64
	Err    error
}

// FetchRequest asks the pinned actor for read references on a chain's blocks,
// loading from disk first when needed, before Deadline.
type FetchRequest struct {
	ID       uint64
	Hashes   []uint64
	Digests  []prefixhash.Digest // Digests[i] must match what Hashes[i] holds
	Deadline time.Time
}

// MissReason says why a lower tier did not grant a block it was asked for.
type MissReason uint8

const (
	MissNone     MissReason = iota // everything asked for was granted
	MissEvicted                    // not held any more
	MissMismatch                   // held under the hash, but its digest differs
	MissFailed                     // a read failed or found the record corrupt
	MissLate                       // the read missed its deadline
)

// FetchGrant answers FetchRequest with read references on the leading run of
// Hashes that pinned memory holds: Slots[i], Bytes[i] for Hashes[i]. The GPU
// actor's copy worker may read Bytes until FetchRelease.
type FetchGrant struct {
	ID    uint64
	Slots []int
	Bytes [][]byte
	// Short says why the grant stops before the end of the request.
	Short MissReason
	// StartedLate: Short is MissLate because the read below began only after
	// the request's deadline (it waited for slots), not because a read
	// under way was cut there; how late it comes says nothing of the lag
	// of a cut read.
	StartedLate bool
}

// FetchRelease drops the read references of a FetchGrant.
type FetchRelease struct {
	Slots []int
}

// PinnedQuery asks the pinned actor to delete or prefetch hashes.
type PinnedQuery struct {
	Kind    QueryKind
	Hashes  []uint64
	Digests []prefixhash.Digest
	Reply   chan *QueryResult
}

// Link names a path blocks travel between two tiers.
type Link uint8

// The links.
const (
	LinkGPUToHost Link = iota + 1
	LinkHostToGPU
	LinkHostToDisk
	LinkDiskToHost
	LinkHostToRemote
	LinkRemoteToHost
)

// Links lists every link, in order.
var Links = []Link{LinkGPUToHost, LinkHostToGPU, LinkHostToDisk, LinkDiskToHost, LinkHostToRemote, LinkRemoteToHost}

func (l Link) String() string {
	switch l {
	case LinkGPUToHost:
		return "gpu_to_host"
	case LinkHostToGPU:
		return "host_to_gpu"
	case LinkHostToDisk:
		return "host_to_disk"
	case LinkDiskToHost:
		return "disk_to_host"
	case LinkHostToRemote:
		return "host_to_remote"
	case LinkRemoteToHost:
		return "remote_to_host"
	}
	return fmt.Sprintf("Link(%d)", int(l))
}

// LinkObserver hears of every finished transfer on a link: blocks and bytes
// moved, how long it took, and ok false if it failed, in whole or in part (a
// Redis pipeline some blocks of which landed reports those blocks moved; a
// copy batch or an I/O that failed, none). It is called
// from copy and I/O goroutines, never an actor's, so it must be safe for
// concurrent use and quick.
type LinkObserver func(l Link, blocks int, bytes int64, d time.Duration, ok bool)

// TokenCounts is what allocations asked and found, in tokens: Prompt is the
// tokens asked for, Served the leading tokens each tier served, indexed by
// Tier.Index.
type TokenCounts struct {
	Prompt uint64
	Served [NumTiers]uint64
}

// Add adds the tokens of one allocation result for a prompt of n tokens.
func (c *TokenCounts) Add(n int, r *AllocResult) {
	c.Prompt += uint64(n)
	for i, x := range r.Tokens {
		c.Served[i] += uint64(x)
	}
}

// ResidencyChange is one block a tier gained (Stored) or lost.
type ResidencyChange struct {
	Stored bool
	Hash   uint64
	// Parent is the hash of the block before it in its chain when
	// HasParent; Tokens its token ids. Known on the GPU tier, which
	// computed the block, and on a disk reopened after a restart, which
	// recorded them with its copy (IndexUpdate.Chains); otherwise (Tokens
	// nil) the event publisher fills them in for the tiers below from what
	// it heard of the block before.
	Parent    uint64
	HasParent bool
	Tokens    []int64
	// LoRA names the adapter the block's KV was computed under ("" for
	// the base model); known where Parent is.
	LoRA string
}

// Residency reports changes of what a tier holds, in the order the tier
// made them, to the KV-event publisher. The message owns its slices, but
// its changes' Tokens may be parts of one larger array (the GPU tier's
// journal slab, shared by many blocks): a receiver that keeps some past
// the message copies them, so as not to keep the whole array alive.
type Residency struct {
	Tier    Tier
	Changes []ResidencyChange
	// Full: Changes are every block the tier holds now, all Stored, and
	// the publisher drops the tier's other blocks. A tier sends it when
	// changes it sent before may have been lost on the way (an actor that
	// relayed them stopped for good).
	Full bool
}

// ResidencyQuery asks the GPU actor, or the index for the pinned and disk
// tiers, which block hashes each tier holds; the reply's map and slices
// belong to the receiver.
type ResidencyQuery struct {
	Reply chan map[Tier][]uint64
}

// EventsSync asks for the sequence number of the last batch published
// (ok false before any). The index forwards it, so the answer covers every
// change the tiers sent before (answered by the events actor).
type EventsSync struct {
	Reply chan<- EventsSeq
}

// EventsSeq answers EventsSync.
type EventsSeq struct {
	Seq uint64
	OK  bool
}

// EventsStatsRequest asks for the publisher's counters.
type EventsStatsRequest struct {
	Reply chan EventStats
}

// EventStats counts the event stream: batches published (numbered) and
// dropped (their send queue was full: a gap subscribers see, still in the
// replay buffer), batches dropped for one subscriber whose own queue was
// full (SubscriberDrops, one per batch and subscriber: a gap that
// subscriber sees), the last sequence number, and the blocks each medium
// holds as the stream says (Resident, by medium name).
type EventStats struct {
	Published, Dropped uint64
	SubscriberDrops    uint64
	LastSeq            uint64
	HasSeq             bool
	Resident           map[string]int
}
