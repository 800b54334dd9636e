package events

import (
	"errors"
	"fmt"
	"slices"
)

// ErrGap says a batch's sequence number is not the one after the last
// applied: batches were dropped. Resynchronise with Replay or Snapshot.
var ErrGap = errors.New("kvtier: events: sequence gap")

// View is a consumer's picture of one publisher's residency, built from
// its batches: what a KV-aware router keeps per replica. It is not safe for
// concurrent use: a router that reads it from several goroutines guards it.
type View struct {
	seq    uint64
	ts     float64 // the last batch applied's timestamp
	hasSeq bool
	held   map[place]map[uint64]struct{}
}

// place is where a hash is held: a medium, in one KV cache group.
type place struct {
	m     Medium
	group int
}

// NewView returns an empty view that has applied nothing.
func NewView() *View { return &View{held: map[place]map[uint64]struct{}{}} }

// Seq returns the last sequence number applied; false before any.
func (v *View) Seq() (uint64, bool) { return v.seq, v.hasSeq }

// Apply applies the batch numbered seq. One past the next is not applied
// and returns ErrGap. One at or before the last applied is a duplicate (a
// replay overlapping live events) and is skipped, unless it is stamped
// later than the last applied: a publisher's timestamps do not go back
// within a run, so such a batch comes from a restarted publisher that
// numbers from below where the view stands, and Apply returns ErrGap (if
// the publisher's clock stepped back, the error is spurious but safe: the
// consumer resynchronises). A batch numbered 0 that opens with
// AllBlocksCleared starts a publisher's run and is always applied: the
// view follows the new run from its first batch (a replay from 0 of the
// same run then rebuilds the same picture, batch by batch). A publisher
// numbered from above every earlier run (Config.FirstSeq) shows every
// restart as a gap. On any error the view is left as it was.
func (v *View) Apply(seq uint64, payload []byte) error {
	b, err := DecodeBatch(payload)
	if err != nil {
		return err
	}
	if v.hasSeq && seq <= v.seq {
		switch {
		case seq == 0 && v.seq > 0 && len(b.Events) > 0 && b.Events[0].Kind == AllBlocksCleared:
			v.reset(0, &b)
			return nil
		case b.TS > v.ts:
			return fmt.Errorf("%w: got %d stamped %.9f after %d stamped %.9f: the publisher restarted", ErrGap, seq, b.TS, v.seq, v.ts)
		}
		return nil
	}
	if v.hasSeq && seq != v.seq+1 {
		return fmt.Errorf("%w: got %d after %d", ErrGap, seq, v.seq)
	}
	applyEvents(v.held, b.Events)
	v.seq, v.ts, v.hasSeq = seq, b.TS, true
	return nil
}

// Reset replaces the view with a snapshot numbered seq (Snapshot's frame):
// batches after seq apply on top of it. A snapshot that does not decode
// returns the error and leaves the view as it was.
func (v *View) Reset(seq uint64, payload []byte) error {
	b, err := DecodeBatch(payload)
	if err != nil {
		return err
	}
	v.reset(seq, &b)
	return nil
}

// reset replaces the view with the decoded batch b, numbered seq.
func (v *View) reset(seq uint64, b *Batch) {
	held := map[place]map[uint64]struct{}{}
	applyEvents(held, b.Events)
	v.held, v.seq, v.ts, v.hasSeq = held, seq, b.TS, true
}

// applyEvents applies decoded events to held.
func applyEvents(held map[place]map[uint64]struct{}, evs []Event) {
	for _, e := range evs {
		at := place{e.Medium, e.Group}
		switch e.Kind {
		case AllBlocksCleared:
			clear(held)
		case BlockStored:
			s := held[at]
			if s == nil {
				s = map[uint64]struct{}{}
				held[at] = s
			}
			for _, h := range e.Hashes {
				s[h] = struct{}{}
			}
		case BlockRemoved:
			s := held[at]
			for _, h := range e.Hashes {
				delete(s, h)
			}
			if s != nil && len(s) == 0 {
				delete(held, at)
			}
		}
	}
}

// Residency returns the hashes each medium holds in any KV cache group,
// sorted; mediums holding none are left out. The map and its slices are
// new, the caller's. For a hybrid model a hash a
// sliding-window group has dropped is still held while the full-attention
// group holds it (GroupResidency tells the groups apart).
func (v *View) Residency() map[Medium][]uint64 {
	sets := map[Medium]map[uint64]struct{}{}
	for at, s := range v.held {
		u := sets[at.m]
		if u == nil {
			u = make(map[uint64]struct{}, len(s))
			sets[at.m] = u
		}
		for h := range s {
			u[h] = struct{}{}
		}
	}
	return sortedSets(sets)
}

// GroupResidency returns the hashes each medium holds in KV cache group g
// (vLLM's group_idx; 0 for a model with one group), sorted; mediums holding
// none are left out. The map and its slices are new, the caller's.
func (v *View) GroupResidency(g int) map[Medium][]uint64 {
	sets := map[Medium]map[uint64]struct{}{}
	for at, s := range v.held {
		if at.group == g {
			sets[at.m] = s
		}
	}
	return sortedSets(sets)
}

func sortedSets(sets map[Medium]map[uint64]struct{}) map[Medium][]uint64 {
	out := map[Medium][]uint64{}
	for m, s := range sets {
		if len(s) == 0 {
			continue
		}
		hs := make([]uint64, 0, len(s))
		for h := range s {
			hs = append(hs, h)
		}
		slices.Sort(hs)
		out[m] = hs
	}
	return out
}
