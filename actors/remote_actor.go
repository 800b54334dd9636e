package actors

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/actor"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/messages"
	"github.com/kvtier/kvtier/remote"
)

// ErrRemoteStopped answers flushes still waiting when the remote actor stops.
var ErrRemoteStopped = fmt.Errorf("kvtier: remote tier: %w", messages.ErrStopped)

// RemoteConfig configures the remote (shared) tier's actor.
type RemoteConfig struct {
	Store *remote.Store // owned by the actor from now on
	// WriteQuotaBytes bounds the bytes of writes in flight; a write over it
	// is denied and counted, never queued (default 256 MiB).
	WriteQuotaBytes int64
	// WriteTimeout bounds one write batch (default 5s); ReadTimeout bounds a
	// read without a deadline of its own and a lookup (default 1s).
	WriteTimeout, ReadTimeout time.Duration
	Log                       *zap.Logger
	// Observe, when set, hears of every batch written or read, from the
	// goroutine that ran it.
	Observe messages.LinkObserver
	// Events, when set, is the KV-event publisher: it hears of blocks a
	// write of this node's left on the tier (those it sent and those a peer
	// had stored already: both are there for this node's reads) and of
	// blocks a read found gone or corrupt (Redis evicts and expires
	// silently: the stream's REMOTE residency is a hint).
	Events *actor.PID
	// Clock is the clock a read's deadline is set on (nil: time.Now): the
	// network call gets the same time left in wall time.
	Clock func() time.Time
}

// wallDeadline is the wall-clock instant that leaves as much time as
// deadline leaves on clock (nil: deadline itself).
func wallDeadline(deadline time.Time, clock func() time.Time) time.Time {
	if clock == nil {
		return deadline
	}
	return time.Now().Add(deadline.Sub(clock()))
}

// RemoteActor is the thin actor over remote.Store. It speaks the lower-tier
// protocol to the pinned actor above it (LowerWrite/LowerWriteDone,
// LowerRead/LowerReadDone: a block leaving host memory is written, a block no
// local tier holds is read into a pinned slot) and answers the index's
// RemoteLookup. Every Redis call runs on its own goroutine under a context
// with a deadline and reports back by message; the actor keeps the quota,
// the flush barrier and the counters. Blocks it holds are not announced to
// the index: the remote tier is shared, so only a lookup can say what it
// holds now.
type RemoteActor struct {
	cfg      RemoteConfig
	store    *remote.Store
	base     context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup // calls in flight: Stopping waits, they touch pinned slots
	inFlight int64          // bytes of writes in flight
	seq      uint64         // writes started
	pending  map[uint64]bool
	flushers []diskFlusher
	stats    messages.TierStats
	// fault, in tests, is called at named points of the handlers and may
	// panic there, as a defect would.
	fault func(point string)
	// taken is false while the LowerWrite or LowerRead being handled has
	// neither been answered nor handed to a call's goroutine: a panic then
	// leaves its slots with nobody, and salvage answers it. cur is that
	// write, once it holds quota.
	taken bool
	cur   *remoteWritten
}

// NewRemoteActor returns the actor's producer (see below: one actor per
// producer).
func NewRemoteActor(cfg RemoteConfig) actor.Producer {
	return newRemoteActor(cfg, nil)
}

func newRemoteActor(cfg RemoteConfig, fault func(string)) actor.Producer {
	if cfg.WriteQuotaBytes <= 0 {
		cfg.WriteQuotaBytes = 256 << 20
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 5 * time.Second
	}
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = time.Second
	}
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}
	// One instance for every incarnation: a restart keeps the calls in
	// flight (their goroutines write pinned slots, and Stopping must wait
	// for them), the quota they hold, the flushes waiting and the counters.
	// So one producer spawns one actor, as it owns one Store.
	ctx, cancel := context.WithCancel(context.Background())
	a := &RemoteActor{cfg: cfg, store: cfg.Store, base: ctx, cancel: cancel, pending: map[uint64]bool{},
		stats: messages.TierStats{Tier: messages.Remote, Extra: map[string]float64{}}, fault: fault}
	return func() actor.Actor { return a }
}

type remoteWritten struct {
	seq    uint64
	to     *actor.PID
	slots  []int    // every item's slot, returned in LowerWriteDone
	hashes []uint64 // the blocks put, parallel to errs and sent
	bytes  int64
	errs   []error
	sent   []bool // remote.Store.PutSent: the block crossed the link (a peer had not stored it)
	done   bool   // the pinned actor has its slots back
}

type remoteRead struct {
	to     *actor.PID
	id     uint64
	out    []remote.Outcome
	hashes []uint64 // the items' hashes
	late   bool
	done   bool // answered
}

type remoteFound struct {
	to  *actor.PID
	res *messages.RemoteLookupResult
	err error
}

// Receive implements actor.Actor.
//
// A handler that panics (a defect) on a finished call's report, or on a
// request it has not yet handed to a call, would drop the pinned slots the
// message gives back: salvage answers it first, then
// the panic goes on to protoactor, which restarts the actor (the same
// instance, see NewRemoteActor).
func (a *RemoteActor) Receive(ctx actor.Context) {
	defer func() {
		if p := recover(); p != nil {
			a.salvage(ctx, ctx.Message(), p)
			panic(p)
		}
	}()
	switch m := ctx.Message().(type) {
	case *messages.LowerWrite:
		a.write(ctx, m)
	case *remoteWritten:
		a.written(ctx, m)
	case *messages.LowerRead:
		a.read(ctx, m)
	case *remoteRead:
		a.readDone(ctx, m)
	case *messages.RemoteLookup:
		a.lookup(ctx, m)
	case *remoteFound:
		if m.err != nil {
			a.stats.Failed++
		}
		ctx.Send(m.to, m.res)
	case *messages.Flush:
		a.flushers = append(a.flushers, diskFlusher{barrier: a.seq, reply: m.Reply})
		a.answerFlushers()
	case *messages.StatsRequest:
		s := a.stats
		s.InFlight = len(a.pending)
		s.Extra = map[string]float64{"write_bytes_in_flight": float64(a.inFlight)}
		m.Reply <- s
	case *actor.Stopping:
		// Calls in flight read or write pinned slots: end them before the
		// Manager frees that memory.
		a.cancel()
		a.wg.Wait()
	case *actor.Stopped:
		_ = a.store.Close()
		for _, f := range a.flushers {
			f.reply <- ErrRemoteStopped
		}
		a.flushers = nil
	case *actor.Started, *actor.Restarting:
	default:
		a.cfg.Log.Warn("remote actor: unexpected message", zap.String("type", typeName(m)))
	}
}

// write starts one Put for the items under the byte quota; the rest are
// denied. The pinned actor gets every slot back once the Put is done. Keys
// are by prefix digest alone (namespace id 0): the digest covers tenant,
// model, LoRA, layout and the whole prefix.
func (a *RemoteActor) write(ctx actor.Context, m *messages.LowerWrite) {
	a.taken, a.cur = false, nil
	w := &remoteWritten{seq: a.seq, to: ctx.Sender(), slots: make([]int, len(m.Items))}
	a.seq++
	var blocks []remote.Block
	for i, it := range m.Items {
		w.slots[i] = it.Slot
		n := int64(len(it.Bytes))
		if a.inFlight+w.bytes+n > a.cfg.WriteQuotaBytes {
			a.stats.Denied++
			continue
		}
		w.bytes += n
		w.hashes = append(w.hashes, it.Hash)
		blocks = append(blocks, remote.Block{Key: remote.Key{Digest: it.Digest}, Hash: it.Hash, Tokens: it.Tokens, Payload: it.Bytes})
	}
	if len(blocks) == 0 {
		ctx.Send(w.to, &messages.LowerWriteDone{Slots: w.slots, From: messages.Remote})
		a.taken = true
		return
	}
	a.inFlight += w.bytes
	a.pending[w.seq] = true
	a.cur = w
	self, sys := ctx.Self(), ctx.ActorSystem()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		c, cancel := context.WithTimeout(a.base, a.cfg.WriteTimeout)
		start := time.Now()
		w.errs, w.sent = a.store.PutSent(c, blocks)
		if obs := a.cfg.Observe; obs != nil {
			// What crossed the link, even in a batch that failed in part:
			// blocks the server held already are reported stored but were
			// not sent.
			n, bytes, ok := 0, int64(0), true
			for i, err := range w.errs {
				if err != nil {
					ok = false
				} else if w.sent[i] {
					n++
					bytes += int64(len(blocks[i].Payload))
				}
			}
			obs(messages.LinkHostToRemote, n, bytes, time.Since(start), ok)
		}
		cancel()
		sys.Root.Send(self, w)
	}()
	a.taken, a.cur = true, nil
}

// written returns a finished Put's slots and releases its quota. Every
// block stored is Written (a peer's copy serves as well as this node's),
// but Offloaded counts only those this node sent, and Failed each block
// that failed.
func (a *RemoteActor) written(ctx actor.Context, w *remoteWritten) {
	a.inFlight -= w.bytes
	delete(a.pending, w.seq)
	a.at("written")
	var ok []uint64
	for i, err := range w.errs {
		if err != nil {
			a.stats.Failed++
			continue
		}
		ok = append(ok, w.hashes[i])
		if w.sent[i] {
			a.stats.Offloaded++
		}
	}
	if a.cfg.Events != nil && len(ok) > 0 {
		r := &messages.Residency{Tier: messages.Remote, Changes: make([]messages.ResidencyChange, len(ok))}
		for i, h := range ok {
			r.Changes[i] = messages.ResidencyChange{Stored: true, Hash: h}
		}
		ctx.Send(a.cfg.Events, r) // before the slots go back: stored below before gone above
	}
	ctx.Send(w.to, &messages.LowerWriteDone{Slots: w.slots, Written: ok, From: messages.Remote})
	w.done = true
	a.answerFlushers()
}

func (a *RemoteActor) answerFlushers() {
	keep := a.flushers[:0]
	for _, f := range a.flushers {
		done := true
		for s := range a.pending {
			if s < f.barrier {
				done = false
				break
			}
		}
		if done {
			f.reply <- nil
		} else {
			keep = append(keep, f)
		}
	}
	a.flushers = keep
}

// read starts one Get into the pinned slots, under the request's deadline
// (or ReadTimeout).
func (a *RemoteActor) read(ctx actor.Context, m *messages.LowerRead) {
	a.taken = false
	items := make([]remote.GetItem, len(m.Items))
	hashes := make([]uint64, len(m.Items))
	for i, it := range m.Items {
		items[i] = remote.GetItem{Key: remote.Key{Digest: it.Digest}, Hash: it.Hash, Dst: it.Bytes}
		hashes[i] = it.Hash
	}
	deadline := wallDeadline(m.Deadline, a.cfg.Clock)
	if m.Deadline.IsZero() {
		deadline = time.Now().Add(a.cfg.ReadTimeout)
	}
	self, sys, to := ctx.Self(), ctx.ActorSystem(), ctx.Sender()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		c, cancel := context.WithDeadline(a.base, deadline)
		start := time.Now()
		out := a.store.Get(c, items)
		if obs := a.cfg.Observe; obs != nil {
			// The hits moved; a block missing or corrupt in the store is
			// the data's state, not the transfer's: the transfer failed
			// only where the server or the deadline failed an item.
			n, bytes, failed := 0, int64(0), false
			for i, o := range out {
				switch o {
				case remote.Hit:
					n++
					bytes += int64(len(items[i].Dst))
				case remote.Failed:
					failed = true
				}
			}
			obs(messages.LinkRemoteToHost, n, bytes, time.Since(start), !failed)
		}
		late := c.Err() != nil
		cancel()
		sys.Root.Send(self, &remoteRead{to: to, id: m.ID, out: out, hashes: hashes, late: late})
	}()
	a.taken = true
}

func (a *RemoteActor) readDone(ctx actor.Context, r *remoteRead) {
	a.at("readDone")
	ok := make([]bool, len(r.out))
	why := make([]messages.MissReason, len(r.out))
	var gone *messages.Residency
	if a.cfg.Events != nil {
		gone = &messages.Residency{Tier: messages.Remote}
	}
	for i, o := range r.out {
		switch o {
		case remote.Hit:
			ok[i] = true
			a.stats.Hits++
			a.stats.Onboarded++ // a bottom tier's Onboarded: blocks it served upwards
		case remote.Missing, remote.Corrupt:
			a.stats.Misses++
			why[i] = messages.MissEvicted
			if o == remote.Corrupt {
				// A record or chunk that failed verification: failed, as a
				// corrupt disk record is (Mismatches are blocks of another
				// prefix).
				a.stats.Failed++
				why[i] = messages.MissFailed
			}
			if gone != nil {
				gone.Changes = append(gone.Changes, messages.ResidencyChange{Hash: r.hashes[i]})
			}
		default:
			if r.late {
				a.stats.Timeouts++
				why[i] = messages.MissLate
			} else {
				a.stats.Failed++
				why[i] = messages.MissFailed
			}
		}
	}
	if gone != nil && len(gone.Changes) > 0 {
		ctx.Send(a.cfg.Events, gone)
	}
	ctx.Send(r.to, &messages.LowerReadDone{ID: r.id, OK: ok, From: messages.Remote, Why: why})
	r.done = true
}

// at is a point a test may make panic (RemoteActor.fault).
func (a *RemoteActor) at(point string) {
	if a.fault != nil {
		a.fault(point)
	}
}

// salvage runs when the handler of m panicked with p: a finished write or
// read not yet answered is answered with nothing written or read (the
// call's goroutine is done with the slots), and so is a LowerWrite or
// LowerRead whose handler neither answered it nor started its call (no
// goroutine has the slots). The quota and the flush
// barrier are settled as the handler would have. A second panic here is
// logged and dropped: the first goes on either way.
func (a *RemoteActor) salvage(ctx actor.Context, m any, p any) {
	a.cfg.Log.Error("remote actor: a handler panicked; answering what its message left waiting",
		zap.String("type", typeName(m)), zap.Any("panic", p), zap.Stack("stack"))
	defer func() {
		if q := recover(); q != nil {
			a.cfg.Log.Error("remote actor: salvage panicked too", zap.Any("panic", q))
		}
	}()
	switch m := m.(type) {
	case *messages.LowerWrite:
		if a.taken {
			return // answered, or a call's goroutine has the slots
		}
		if w := a.cur; w != nil && a.pending[w.seq] {
			a.inFlight -= w.bytes
			delete(a.pending, w.seq)
		}
		a.cur = nil
		a.taken = true
		a.stats.Failed += uint64(len(m.Items))
		ctx.Send(ctx.Sender(), &messages.LowerWriteDone{Slots: writeSlots(m), From: messages.Remote})
		a.answerFlushers()
	case *messages.LowerRead:
		if a.taken {
			return
		}
		a.taken = true
		a.stats.Failed += uint64(len(m.Items))
		ctx.Send(ctx.Sender(), readFailed(m.ID, len(m.Items), messages.Remote))
	case *remoteWritten:
		if m.done {
			return
		}
		if a.pending[m.seq] {
			a.inFlight -= m.bytes
			delete(a.pending, m.seq)
		}
		a.stats.Failed += uint64(len(m.hashes))
		m.done = true
		ctx.Send(m.to, &messages.LowerWriteDone{Slots: m.slots, From: messages.Remote})
		a.answerFlushers()
	case *remoteRead:
		if m.done {
			return
		}
		m.done = true
		a.stats.Failed += uint64(len(m.hashes))
		ctx.Send(m.to, readFailed(m.id, len(m.hashes), messages.Remote))
	}
}

// lookup asks how much of each chain the remote tier holds, in one round
// trip, off the actor.
func (a *RemoteActor) lookup(ctx actor.Context, m *messages.RemoteLookup) {
	chains := make([][]remote.Key, len(m.Digests))
	for i, ds := range m.Digests {
		for _, d := range ds {
			chains[i] = append(chains[i], remote.Key{Digest: d})
		}
	}
	self, sys, to := ctx.Self(), ctx.ActorSystem(), ctx.Sender()
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		c, cancel := context.WithTimeout(a.base, a.cfg.ReadTimeout)
		found, err := a.store.LookupChains(c, chains)
		cancel()
		sys.Root.Send(self, &remoteFound{to: to, res: &messages.RemoteLookupResult{ID: m.ID, Found: found}, err: err})
	}()
}
