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
// its batches: what a KV-aware router keeps per replica.
type View struct {
	seq    uint64
	hasSeq bool
	held   map[Medium]map[uint64]struct{}
}

// NewView returns an empty view that has applied nothing.
func NewView() *View { return &View{held: map[Medium]map[uint64]struct{}{}} }

// Seq returns the last sequence number applied; false before any.
func (v *View) Seq() (uint64, bool) { return v.seq, v.hasSeq }

// Apply applies the batch numbered seq. A batch at or before the last
// applied is skipped (a replay overlapping live events); one past the next
// is not applied and returns ErrGap. A batch numbered 0 that opens with
// AllBlocksCleared starts a publisher's run and is always applied: a
// publisher that restarted numbers from 0 again, and the view follows the
// new run instead of skipping it (a replay from 0 of the same run then
// rebuilds the same picture, batch by batch).
func (v *View) Apply(seq uint64, payload []byte) error {
	if v.hasSeq && seq == 0 && v.seq > 0 {
		b, err := DecodeBatch(payload)
		if err != nil {
			return err
		}
		if len(b.Events) > 0 && b.Events[0].Kind == AllBlocksCleared {
			return v.Reset(0, payload)
		}
	}
	if v.hasSeq && seq <= v.seq {
		return nil
	}
	if v.hasSeq && seq != v.seq+1 {
		return fmt.Errorf("%w: got %d after %d", ErrGap, seq, v.seq)
	}
	if err := v.apply(payload); err != nil {
		return err
	}
	v.seq, v.hasSeq = seq, true
	return nil
}

// Reset replaces the view with a snapshot numbered seq (Snapshot's frame):
// batches after seq apply on top of it.
func (v *View) Reset(seq uint64, payload []byte) error {
	v.held = map[Medium]map[uint64]struct{}{}
	if err := v.apply(payload); err != nil {
		return err
	}
	v.seq, v.hasSeq = seq, true
	return nil
}

func (v *View) apply(payload []byte) error {
	b, err := DecodeBatch(payload)
	if err != nil {
		return err
	}
	for _, e := range b.Events {
		switch e.Kind {
		case AllBlocksCleared:
			v.held = map[Medium]map[uint64]struct{}{}
		case BlockStored:
			s := v.held[e.Medium]
			if s == nil {
				s = map[uint64]struct{}{}
				v.held[e.Medium] = s
			}
			for _, h := range e.Hashes {
				s[h] = struct{}{}
			}
		case BlockRemoved:
			for _, h := range e.Hashes {
				delete(v.held[e.Medium], h)
			}
		}
	}
	return nil
}

// Residency returns the hashes each medium holds, sorted; mediums holding
// none are left out.
func (v *View) Residency() map[Medium][]uint64 {
	out := map[Medium][]uint64{}
	for m, s := range v.held {
		for h := range s {
			out[m] = append(out[m], h)
		}
		if hs := out[m]; len(hs) > 0 {
			slices.Sort(hs)
		}
	}
	return out
}
