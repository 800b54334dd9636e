package events

import (
	"math/bits"
	"slices"
	"time"

	"github.com/kvtier/kvtier/messages"
)

// Config configures a Publisher.
type Config struct {
	Format    Format
	BlockSize int // tokens per block, the events' block_size
	DPRank    int // the batches' dp_rank
	// BufferSteps bounds the batches kept for replay (default 10000, as
	// vLLM's).
	BufferSteps int
	// FirstSeq numbers the run's first batch (default 0, as vLLM's); the
	// rest follow one by one. A process should pass a number above every
	// earlier run's, such as uint64(time.Now().UnixNano()) (a run would
	// have to publish more than one batch per nanosecond to reach the next
	// run's first number), so that a subscriber of the previous run sees
	// the restart as a gap (View.Apply's ErrGap) and resynchronises from a
	// snapshot, rather than skipping the new run's batches numbered at or
	// below where it stood as duplicates. Keep it below 1<<63: the replay
	// protocol's end marker is the number -1.
	FirstSeq uint64
}

// Frame is one published batch: its sequence number and msgpack payload.
// A Payload is never changed once made; holders share it read-only.
type Frame struct {
	Seq     uint64
	Payload []byte
}

// Publisher is the KV-event stream's plain state machine: it turns the
// tiers' residency changes into numbered batches, keeps the last
// BufferSteps of them for replay, and keeps the residency they add up to,
// for snapshots. Its owner (actors.EventsActor) sends the frames; it is not
// safe for concurrent use.
type Publisher struct {
	cfg    Config
	next   uint64 // the next batch's sequence number
	sent   bool   // a batch was published
	ring   []Frame
	head   int // ring index of the oldest frame
	blocks map[uint64]*resident
	count  [4]int // blocks per medium
}

// resident is a block some medium holds, with what a BlockStored needs.
type resident struct {
	mediums   uint8 // bit i: Mediums[i]
	parent    uint64
	hasParent bool
	tokens    []int64 // nil: unknown; the Publisher's own copy
	lora      string  // the adapter it was computed under ("" for the base model, or unknown)
}

// NewPublisher returns a Publisher that has published nothing.
func NewPublisher(cfg Config) *Publisher {
	if cfg.BufferSteps <= 0 {
		cfg.BufferSteps = 10000
	}
	return &Publisher{cfg: cfg, next: cfg.FirstSeq, blocks: map[uint64]*resident{}}
}

// Start publishes AllBlocksCleared: a consumer that knew this endpoint
// before (a restarted node) drops what it knew, and learns again from the
// stores that follow (the disk's records are announced as it opens). The
// Publisher forgets the residency too, so that those stores are announced
// and a snapshot holds what the consumers do.
func (p *Publisher) Start(now time.Time) Frame {
	clear(p.blocks)
	p.count = [4]int{}
	return p.publish(now, []Event{{Kind: AllBlocksCleared}})
}

func (p *Publisher) publish(now time.Time, evs []Event) Frame {
	b := Batch{TS: float64(now.UnixNano()) / 1e9, Events: evs, DPRank: p.cfg.DPRank}
	f := Frame{Seq: p.next, Payload: p.cfg.Format.AppendBatch(make([]byte, 0, sizeHint(evs)), &b)}
	p.next++
	p.sent = true
	if len(p.ring) < p.cfg.BufferSteps {
		p.ring = append(p.ring, f)
	} else {
		p.ring[p.head] = f
		p.head = (p.head + 1) % len(p.ring)
	}
	return f
}

// sizeHint is about the encoded size of evs, so the payload is made once.
func sizeHint(evs []Event) int {
	n := 16
	for i := range evs {
		n += 128 + 9*len(evs[i].Hashes) + 3*len(evs[i].Tokens)
	}
	return n
}

// Apply turns one tier's changes into a batch and publishes it; false when
// nothing changed (a store of a block the medium holds already, a removal
// of one it does not). Runs of stores that chain (each the previous one's
// child) share one BlockStored, as vLLM sends a request's new blocks. A
// Full residency first removes (one BlockRemoved, children before their
// parents) the blocks the medium holds that it does not list.
func (p *Publisher) Apply(r *messages.Residency, now time.Time) (Frame, bool) {
	m := MediumOf(r.Tier)
	bit := mediumBit(m)
	if bit == 0 {
		return Frame{}, false
	}
	var evs []Event
	if r.Full {
		if gone := p.unlisted(r.Changes, bit); len(gone) > 0 {
			for _, h := range gone {
				p.drop(h, bit)
			}
			evs = append(evs, Event{Kind: BlockRemoved, Hashes: gone, Medium: m})
		}
	}
	for _, c := range r.Changes {
		b := p.blocks[c.Hash]
		if !c.Stored {
			if b == nil || b.mediums&bit == 0 {
				continue
			}
			p.drop(c.Hash, bit)
			if n := len(evs); n > 0 && evs[n-1].Kind == BlockRemoved {
				evs[n-1].Hashes = append(evs[n-1].Hashes, c.Hash)
			} else {
				evs = append(evs, Event{Kind: BlockRemoved, Hashes: []uint64{c.Hash}, Medium: m})
			}
			continue
		}
		if b == nil {
			b = &resident{}
			p.blocks[c.Hash] = b
		}
		if c.Tokens != nil { // the GPU, which computed it, knows best
			b.parent, b.hasParent, b.lora = c.Parent, c.HasParent, c.LoRA
			if b.tokens == nil || !slices.Equal(b.tokens, c.Tokens) {
				// A copy: the GPU tier's tokens are slices of its journal's
				// slab, shared by 64 blocks, which a block kept here for as
				// long as a lower tier holds it would keep whole.
				b.tokens = slices.Clone(c.Tokens)
			}
		}
		if b.mediums&bit != 0 {
			continue
		}
		b.mediums |= bit
		p.count[bitIndex(bit)]++
		if n := len(evs); n > 0 && p.extends(&evs[n-1], c.Hash, b) {
			e := &evs[n-1]
			e.Hashes = append(e.Hashes, c.Hash)
			e.Tokens = append(e.Tokens, b.tokens...)
			continue
		}
		evs = append(evs, p.stored(c.Hash, b, m))
	}
	if len(evs) == 0 {
		return Frame{}, false
	}
	return p.publish(now, evs), true
}

// extends reports whether block h (held as b) continues BlockStored e:
// its parent is e's last hash and both carry tokens or neither does.
func (p *Publisher) extends(e *Event, h uint64, b *resident) bool {
	if e.Kind != BlockStored || !b.hasParent || b.parent != e.Hashes[len(e.Hashes)-1] || b.lora != e.LoRAName {
		return false
	}
	return (len(e.Tokens) > 0) == (b.tokens != nil)
}

func (p *Publisher) stored(h uint64, b *resident, m Medium) Event {
	e := Event{Kind: BlockStored, Hashes: []uint64{h}, Parent: b.parent, HasParent: b.hasParent, BlockSize: p.cfg.BlockSize, Medium: m, LoRAName: b.lora}
	// Shared, read-only, for the encoding only; capped so that a chain's
	// next block appends to a copy.
	e.Tokens = b.tokens[:len(b.tokens):len(b.tokens)]
	if e.Tokens == nil {
		e.Tokens = []int64{}
	}
	return e
}

func (p *Publisher) drop(h uint64, bit uint8) {
	b := p.blocks[h]
	b.mediums &^= bit
	p.count[bitIndex(bit)]--
	if b.mediums == 0 {
		delete(p.blocks, h)
	}
}

// unlisted returns the blocks the medium of bit holds that changes does
// not store, children first: the reverse of parentsFirst, so that a
// consumer keeping a tree of parent links is never told to remove a block
// before a child of it that goes too. A child that changes lists stays,
// so its parent goes with the child still held (the tier holds the child
// alone); blocks on a cycle of parent links (hash collisions) go in
// parentsFirst's order reversed, the cycle's smallest hash last.
func (p *Publisher) unlisted(changes []messages.ResidencyChange, bit uint8) []uint64 {
	listed := make(map[uint64]bool, len(changes))
	for _, c := range changes {
		if c.Stored {
			listed[c.Hash] = true
		}
	}
	gone := p.parentsFirst(bit)
	slices.Reverse(gone)
	return slices.DeleteFunc(gone, func(h uint64) bool { return listed[h] })
}

func bitIndex(bit uint8) int { return bits.TrailingZeros8(bit) }

// held returns the hashes of the blocks the medium of bit holds, sorted.
func (p *Publisher) held(bit uint8) []uint64 {
	var hs []uint64
	for h, b := range p.blocks {
		if b.mediums&bit != 0 {
			hs = append(hs, h)
		}
	}
	slices.Sort(hs)
	return hs
}

// parentsFirst returns the hashes of the blocks the medium of bit holds,
// each after its parent when the medium holds the parent too: a depth-first
// walk of the medium's chains from their roots (the blocks whose parent it
// does not hold), roots and each block's children in hash order, so that a
// chain's blocks come one after another. Blocks on a cycle of parent links
// (only hash collisions make one) are listed too, from the smallest hash of
// the cycle, which then precedes its parent. O(n) after held's sort.
func (p *Publisher) parentsFirst(bit uint8) []uint64 {
	hs := p.held(bit)
	// children[h]: h's children the medium holds, in hash order.
	children := make(map[uint64][]uint64)
	var roots []uint64
	for _, h := range hs {
		b := p.blocks[h]
		if b.hasParent && b.parent != h {
			if pb := p.blocks[b.parent]; pb != nil && pb.mediums&bit != 0 {
				children[b.parent] = append(children[b.parent], h)
				continue
			}
		}
		roots = append(roots, h)
	}
	out := make([]uint64, 0, len(hs))
	listed := make(map[uint64]bool, len(hs))
	var stack []uint64
	walk := func(root uint64) {
		stack = append(stack[:0], root)
		for len(stack) > 0 {
			h := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if listed[h] {
				continue
			}
			listed[h] = true
			out = append(out, h)
			cs := children[h]
			for i := len(cs) - 1; i >= 0; i-- { // the smallest on top
				stack = append(stack, cs[i])
			}
		}
	}
	for _, h := range roots {
		walk(h)
	}
	if len(out) < len(hs) { // cycles, which no root reaches
		for _, h := range hs {
			if !listed[h] {
				walk(h)
			}
		}
	}
	return out
}

// Replay returns the buffered frames numbered from on, oldest first (none
// when from is past the last; the oldest kept when from is older).
func (p *Publisher) Replay(from uint64) []Frame {
	var out []Frame
	for i := range p.ring {
		f := p.ring[(p.head+i)%len(p.ring)]
		if f.Seq >= from {
			out = append(out, f)
		}
	}
	return out
}

// LastSeq is the sequence number of the last batch published; false
// before the first.
func (p *Publisher) LastSeq() (uint64, bool) {
	if !p.sent {
		return 0, false
	}
	return p.next - 1, true
}

// Snapshot returns every medium's residency as one batch numbered as the
// last batch published (before the first, one below Config.FirstSeq, or 0):
// AllBlocksCleared, then each medium's blocks in Mediums order, parents
// first (see parentsFirst), a run of blocks that chain sharing one
// BlockStored as Apply's do. A consumer that applies it, then the batches
// numbered after it, holds what the tiers hold; one that builds a tree from
// parent links (Dynamo's indexer refuses a BlockStored whose parent it does
// not know) meets every parent the medium holds before its children. It is
// not buffered for replay.
func (p *Publisher) Snapshot(now time.Time) Frame {
	evs := []Event{{Kind: AllBlocksCleared}}
	for _, m := range Mediums {
		for _, h := range p.parentsFirst(mediumBit(m)) {
			b := p.blocks[h]
			if n := len(evs); evs[n-1].Medium == m && p.extends(&evs[n-1], h, b) {
				e := &evs[n-1]
				e.Hashes = append(e.Hashes, h)
				e.Tokens = append(e.Tokens, b.tokens...)
				continue
			}
			evs = append(evs, p.stored(h, b, m))
		}
	}
	seq := p.next
	if seq > 0 {
		seq--
	}
	b := Batch{TS: float64(now.UnixNano()) / 1e9, Events: evs, DPRank: p.cfg.DPRank}
	return Frame{Seq: seq, Payload: p.cfg.Format.AppendBatch(nil, &b)}
}

// Residency returns the hashes each medium holds, sorted; mediums holding
// none are left out.
func (p *Publisher) Residency() map[Medium][]uint64 {
	out := map[Medium][]uint64{}
	for _, m := range Mediums {
		if hs := p.held(mediumBit(m)); len(hs) > 0 {
			out[m] = hs
		}
	}
	return out
}

// Count returns how many blocks medium m holds.
func (p *Publisher) Count(m Medium) int { return p.count[bitIndex(mediumBit(m))] }
