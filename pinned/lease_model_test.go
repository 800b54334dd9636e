package pinned

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/prefixhash"
)

// The pinned tier as a DMA engine sees it: every slot it hands out is a
// lease — written by the GPU between OffloadGrant and OffloadDone, read by
// the GPU between FetchGrant and its Release, read by the tier below
// between LowerWrite and LowerWriteDone, written by it between LowerRead
// and LowerReadDone. TestTierLeases drives the tier with random events
// and completes the leases in random order, copying real bytes (a block's
// identity, or garbage for a failed fill) at the end of a write lease, and
// checks that no slot is leased for writing while any lease holds it, nor
// for reading while it is being written, and that every read lease finds
// the bytes of the block it names (the digest the reader asked for).

// leaseBlock is a block identity: a hash and which of two prefixes
// (digests) under it.
type leaseBlock struct {
	h uint64
	v byte
}

func (b leaseBlock) digest() prefixhash.Digest {
	return prefixhash.Digest{byte(b.h), byte(b.h >> 8), 0xCD, b.v + 1}
}

func (b leaseBlock) stamp(dst []byte) {
	binary.LittleEndian.PutUint64(dst, b.h<<8|uint64(b.v)+1)
}

func readStamp(src []byte) uint64 { return binary.LittleEndian.Uint64(src) }

type lease struct {
	write bool
	what  string
}

type leaseWorld struct {
	t      *testing.T
	rng    *rand.Rand
	tr     *Tier
	leases map[int][]*lease
	log    []string

	offloads  []*leaseOffload
	fetches   []*leaseFetch
	writes    []*leaseWrite
	reads     []*leaseRead
	below     map[uint64]byte // the tier below: hash -> variant held
	lowerGone bool
	fetchID   uint64
	now       time.Time
	offerID   uint64
}

type leaseOffload struct {
	slots  []int
	blocks []leaseBlock
	ls     []*lease
}

type leaseFetch struct {
	slots []int
	ls    []*lease
}

type leaseWrite struct {
	m  *messages.LowerWrite
	ls []*lease
}

type leaseRead struct {
	m  *messages.LowerRead
	ls []*lease
}

func (w *leaseWorld) fail(format string, args ...any) {
	w.t.Helper()
	tail := w.log
	if len(tail) > 30 {
		tail = tail[len(tail)-30:]
	}
	for _, l := range tail {
		w.t.Log(l)
	}
	w.t.Fatalf(format, args...)
}

func (w *leaseWorld) take(slot int, write bool, what string) *lease {
	w.t.Helper()
	for _, l := range w.leases[slot] {
		if write || l.write {
			w.fail("slot %d leased for %s (write %v) while %s (write %v) still holds it", slot, what, write, l.what, l.write)
		}
	}
	l := &lease{write: write, what: what}
	w.leases[slot] = append(w.leases[slot], l)
	return l
}

func (w *leaseWorld) drop(slot int, l *lease) {
	ls := w.leases[slot]
	for i, x := range ls {
		if x == l {
			w.leases[slot] = append(ls[:i], ls[i+1:]...)
			return
		}
	}
	w.fail("lease %s on slot %d dropped twice", l.what, slot)
}

// step takes the tier's Ready and starts what it asks for.
func (w *leaseWorld) step() {
	w.t.Helper()
	r := w.tr.Ready()
	for _, f := range r.Replies {
		f()
	}
	if err := w.tr.CheckInvariants(); err != nil {
		w.fail("invariants: %v", err)
	}
	for _, s := range r.Sends {
		switch g := s.Msg.(type) {
		case *messages.OffloadGrant:
			o := s.To.(*leaseOffer)
			lo := &leaseOffload{}
			for i, slot := range g.Slots {
				if slot < 0 {
					continue
				}
				lo.slots = append(lo.slots, slot)
				lo.blocks = append(lo.blocks, o.blocks[i])
				lo.ls = append(lo.ls, w.take(slot, true, fmt.Sprintf("offload of %v", o.blocks[i])))
			}
			w.log = append(w.log, fmt.Sprintf("grant %v for %v", g.Slots, o.blocks))
			if len(lo.slots) > 0 {
				w.offloads = append(w.offloads, lo)
			}
		case *messages.FetchGrant:
			f := s.To.(*leaseAsk)
			lf := &leaseFetch{}
			w.log = append(w.log, fmt.Sprintf("fetch grant %v short %v for %v", g.Slots, g.Short, f.blocks))
			for i, slot := range g.Slots {
				if got, want := readStamp(g.Bytes[i]), readStamp(w.tr.Pool().Bytes(slot)); got != want {
					w.fail("fetch grant's bytes are not slot %d's", slot)
				}
				var want [8]byte
				f.blocks[i].stamp(want[:])
				if got := readStamp(g.Bytes[i]); got != readStamp(want[:]) {
					w.fail("fetch of %v granted slot %d holding %x, want %x", f.blocks[i], slot, got, readStamp(want[:]))
				}
				lf.slots = append(lf.slots, slot)
				lf.ls = append(lf.ls, w.take(slot, false, fmt.Sprintf("fetch of %v", f.blocks[i])))
			}
			if len(lf.slots) > 0 {
				w.fetches = append(w.fetches, lf)
			}
		default:
			w.fail("unexpected send %T", s.Msg)
		}
	}
	for _, m := range r.ToLower {
		switch m := m.(type) {
		case *messages.LowerWrite:
			lw := &leaseWrite{m: m}
			for _, it := range m.Items {
				b := leaseBlock{h: it.Hash}
				for v := range byte(2) {
					if (leaseBlock{h: it.Hash, v: v}).digest() == it.Digest {
						b.v = v
					}
				}
				var want [8]byte
				b.stamp(want[:])
				if got := readStamp(it.Bytes); got != readStamp(want[:]) {
					w.fail("write below of %v from slot %d holding %x, want %x", b, it.Slot, got, readStamp(want[:]))
				}
				lw.ls = append(lw.ls, w.take(it.Slot, false, fmt.Sprintf("write below of %v", b)))
			}
			w.log = append(w.log, fmt.Sprintf("lower write %d items", len(m.Items)))
			w.writes = append(w.writes, lw)
		case *messages.LowerRead:
			lr := &leaseRead{m: m}
			for _, it := range m.Items {
				lr.ls = append(lr.ls, w.take(it.Slot, true, fmt.Sprintf("read below of %016x", it.Hash)))
			}
			w.log = append(w.log, fmt.Sprintf("lower read %d items", len(m.Items)))
			w.reads = append(w.reads, lr)
		}
	}
}

// leaseOffer and leaseAsk stand for the GPU (the Peer of an offer or a
// fetch), carrying what it asked for.
type leaseOffer struct{ blocks []leaseBlock }
type leaseAsk struct{ blocks []leaseBlock }

func (w *leaseWorld) block() leaseBlock {
	return leaseBlock{h: 1 + uint64(w.rng.IntN(7)), v: byte(w.rng.IntN(8) / 7)}
}

func (w *leaseWorld) chain() []leaseBlock {
	n := 1 + w.rng.IntN(3)
	bs := make([]leaseBlock, 0, n)
	seen := map[uint64]bool{}
	for range n {
		b := w.block()
		if seen[b.h] {
			continue
		}
		seen[b.h] = true
		bs = append(bs, b)
	}
	return bs
}

func pick[T any](rng *rand.Rand, s *[]T) (T, bool) {
	var zero T
	if len(*s) == 0 {
		return zero, false
	}
	i := rng.IntN(len(*s))
	x := (*s)[i]
	*s = append((*s)[:i], (*s)[i+1:]...)
	return x, true
}

func (w *leaseWorld) event() {
	tr := w.tr
	switch k := w.rng.IntN(100); {
	case k < 14:
		bs := w.chain()
		w.offerID++
		m := &messages.OffloadRequest{ID: w.offerID}
		for _, b := range bs {
			m.Items = append(m.Items, messages.OffloadItem{Hash: b.h, Digest: b.digest(), Tokens: 4})
		}
		w.log = append(w.log, fmt.Sprintf("offer %v", bs))
		tr.Offload(m, &leaseOffer{blocks: bs})
	case k < 32:
		o, ok := pick(w.rng, &w.offloads)
		if !ok {
			return
		}
		var err error
		if w.rng.IntN(6) == 0 {
			err = fmt.Errorf("copy failed")
		}
		hashes := make([]uint64, len(o.slots))
		for i, s := range o.slots {
			hashes[i] = o.blocks[i].h
			if err == nil {
				o.blocks[i].stamp(tr.Pool().Bytes(s))
			} else {
				binary.LittleEndian.PutUint64(tr.Pool().Bytes(s), 0xBAD0)
			}
			w.drop(s, o.ls[i])
		}
		w.log = append(w.log, fmt.Sprintf("offload done %v err %v", o.slots, err))
		tr.OffloadDone(&messages.OffloadDone{Slots: o.slots, Hashes: hashes, Err: err})
	case k < 46:
		bs := w.chain()
		w.fetchID++
		m := &messages.FetchRequest{ID: w.fetchID}
		for _, b := range bs {
			m.Hashes = append(m.Hashes, b.h)
			m.Digests = append(m.Digests, b.digest())
		}
		if w.rng.IntN(3) == 0 {
			m.Deadline = w.now.Add(time.Duration(w.rng.IntN(3)) * time.Millisecond)
		}
		w.now = w.now.Add(time.Duration(w.rng.IntN(2)) * time.Millisecond)
		tr.SetNow(w.now)
		w.log = append(w.log, fmt.Sprintf("fetch %v", bs))
		tr.Fetch(m, &leaseAsk{blocks: bs})
	case k < 62:
		f, ok := pick(w.rng, &w.fetches)
		if !ok {
			return
		}
		for i, s := range f.slots {
			w.drop(s, f.ls[i])
		}
		w.log = append(w.log, fmt.Sprintf("release %v", f.slots))
		tr.Release(f.slots)
	case k < 74:
		lw, ok := pick(w.rng, &w.writes)
		if !ok {
			return
		}
		done := &messages.LowerWriteDone{From: messages.Disk}
		for i, it := range lw.m.Items {
			done.Slots = append(done.Slots, it.Slot)
			if w.rng.IntN(4) > 0 {
				for v := range byte(2) {
					if (leaseBlock{h: it.Hash, v: v}).digest() == it.Digest {
						w.below[it.Hash] = v
					}
				}
				done.Written = append(done.Written, it.Hash)
			}
			w.drop(it.Slot, lw.ls[i])
		}
		w.log = append(w.log, fmt.Sprintf("lower write done %v written %v", done.Slots, done.Written))
		tr.LowerWritten(done)
	case k < 86:
		lr, ok := pick(w.rng, &w.reads)
		if !ok {
			return
		}
		done := &messages.LowerReadDone{ID: lr.m.ID, OK: make([]bool, len(lr.m.Items)), From: messages.Disk}
		for i, it := range lr.m.Items {
			v, held := w.below[it.Hash]
			b := leaseBlock{h: it.Hash, v: v}
			if held && b.digest() == it.Digest && w.rng.IntN(5) > 0 {
				b.stamp(it.Bytes)
				done.OK[i] = true
			} else {
				binary.LittleEndian.PutUint64(it.Bytes, 0xBAD1) // a read that failed part way
			}
			w.drop(it.Slot, lr.ls[i])
		}
		w.log = append(w.log, fmt.Sprintf("lower read done %d ok %v", lr.m.ID, done.OK))
		tr.LowerRead(done)
	case k < 90:
		bs := w.chain()
		m := &messages.PinnedQuery{Kind: messages.QueryDelete, Reply: make(chan *messages.QueryResult, 1)}
		for _, b := range bs {
			m.Hashes = append(m.Hashes, b.h)
			m.Digests = append(m.Digests, b.digest())
		}
		w.log = append(w.log, fmt.Sprintf("delete %v", bs))
		tr.Query(m)
	case k < 94:
		bs := w.chain()
		m := &messages.PinnedQuery{Kind: messages.QueryPrefetch, Reply: make(chan *messages.QueryResult, 1)}
		for _, b := range bs {
			m.Hashes = append(m.Hashes, b.h)
			m.Digests = append(m.Digests, b.digest())
		}
		w.log = append(w.log, fmt.Sprintf("prefetch %v", bs))
		tr.Query(m)
	case k < 97:
		var gone []uint64
		for h := range w.below {
			if w.rng.IntN(3) == 0 {
				gone = append(gone, h)
				delete(w.below, h)
			}
		}
		w.log = append(w.log, fmt.Sprintf("below gone %v", gone))
		tr.BelowGone(gone)
	case k < 98:
		if w.rng.IntN(8) > 0 {
			return
		}
		// Stop leaves every slot in flight as it is: nothing is handed
		// out again, and the copies and I/O still on them report into a
		// tier that ignores them.
		w.log = append(w.log, "stop")
		tr.Stop()
	default:
		if w.lowerGone || w.rng.IntN(10) > 0 {
			return
		}
		// The tier below stopped for good: its actor waited for its I/O
		// first, so its leases end (reads unfinished, bytes unspecified).
		for _, lr := range w.reads {
			for i, it := range lr.m.Items {
				binary.LittleEndian.PutUint64(it.Bytes, 0xBAD2)
				w.drop(it.Slot, lr.ls[i])
			}
		}
		for _, lw := range w.writes {
			for i, it := range lw.m.Items {
				w.drop(it.Slot, lw.ls[i])
			}
		}
		w.reads, w.writes, w.lowerGone = nil, nil, true
		w.log = append(w.log, "lower gone")
		tr.LowerGone()
	}
	w.step()
}

func TestTierLeases(t *testing.T) {
	for seed := range uint64(600) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 0x1ea5e))
			kinds := []policy.Kind{policy.LRU, policy.FIFO, policy.S3FIFO}
			ingest := []messages.Ingestion{messages.IngestEvict, messages.IngestAll, messages.IngestHot}
			lower := rng.IntN(4) > 0
			tr := NewTier(TierConfig{Pool: newPool(t, 2+rng.IntN(5), 64, kinds[rng.IntN(3)]), WriteQuota: 1 + rng.IntN(6),
				Lower: lower, LowerIngestion: ingest[rng.IntN(3)], HotHits: 1 + rng.IntN(2), FreeTarget: rng.IntN(3)})
			w := &leaseWorld{t: t, rng: rng, tr: tr, leases: map[int][]*lease{}, below: map[uint64]byte{},
				now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			tr.SetNow(w.now)
			for range 400 {
				w.event()
			}
			if testing.Verbose() {
				st := tr.Stats()
				t.Logf("hits %d misses %d evictions %d offloaded %d onboarded %d mismatches %d", st.Hits, st.Misses, st.Evictions, st.Offloaded, st.Onboarded, st.Mismatches)
			}
		})
	}
}
