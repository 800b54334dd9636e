package group

import (
	"context"
	"fmt"
)

// Local is a Collective for ranks in one process (tests, the demo, a
// single-host server running one goroutine per rank). One goroutine owns
// the reductions in flight; ranks talk to it through a channel.
//
// A reduction completes when every rank has arrived. When a rank's context
// ends first, or Fail marks a rank failed, the reduction fails on every
// rank with a *RankError — those waiting and those arriving later — so no
// rank waits for a peer that will never come. A rank whose context ends
// after the reduction completed gets the result (the reduction took
// effect everywhere). Close fails everything still waiting with ErrClosed.
//
// A failed reduction is kept until every rank that may still arrive has
// had its answer, and no longer: a rank Fail marked is not waited for, so
// the reductions in flight at a Fail and every later one are forgotten
// once the other ranks have passed them. If the failed rank arrives
// anyway, it gets an error too.
type Local struct {
	n    int
	in   chan any
	done chan struct{}
	stop chan struct{}
}

// NewLocal starts the reductions' owner for n ranks. Close stops it.
func NewLocal(n int) (*Local, error) {
	if n < 1 {
		return nil, &ConfigError{"n", n, "a group has at least one rank"}
	}
	l := &Local{n: n, in: make(chan any), done: make(chan struct{}), stop: make(chan struct{})}
	go l.run()
	return l, nil
}

// Rank returns rank r's side of the collective.
func (l *Local) Rank(r int) Collective {
	if r < 0 || r >= l.n {
		panic(fmt.Sprintf("kvtier: group: rank %d of a group of %d", r, l.n))
	}
	return localRank{l: l, rank: r}
}

// Fail marks rank failed: every reduction waiting and every later one
// fails on every rank with a *RankError wrapping err. It stands for a
// process that died, which a real collective detects by timeout. rank is
// in [0, n), as for Rank.
func (l *Local) Fail(rank int, err error) {
	if rank < 0 || rank >= l.n {
		panic(fmt.Sprintf("kvtier: group: Fail of rank %d of a group of %d", rank, l.n))
	}
	select {
	case l.in <- failMsg{rank: rank, err: err}:
	case <-l.done:
	}
}

// Close fails every reduction waiting with ErrClosed and stops the owner;
// later reductions fail with ErrClosed. It is safe to call more than once.
func (l *Local) Close() {
	select {
	case l.stop <- struct{}{}:
		<-l.done
	case <-l.done:
	}
}

type reply struct {
	v   int64
	err error
}

type arriveMsg struct {
	rank  int
	op    uint64
	v     int64
	reply chan reply // buffered 1; answered exactly once
}

type cancelMsg struct {
	rank int
	op   uint64
	err  error
}

type failMsg struct {
	rank int
	err  error
}

// pendingMsg asks the owner how many reductions it keeps (tests: a
// reduction that has failed must not be kept for ever).
type pendingMsg chan int // buffered 1

// reduction is one opID's state, owned by run.
type reduction struct {
	arrived int
	seen    []bool
	min     int64
	waiting []chan reply
	err     error // the reduction failed; kept until settled
}

func (l *Local) run() {
	defer close(l.done)
	ops := map[uint64]*reduction{}
	var failed *RankError               // the latest Fail: every later reduction fails with it
	failedAt := func(op uint64) error { // failed, naming the reduction
		return &RankError{Rank: failed.Rank, Op: op, Err: failed.Err}
	}
	dead := make([]bool, l.n) // the ranks Fail marked: never waited for
	get := func(op uint64) *reduction {
		r := ops[op]
		if r == nil {
			r = &reduction{seen: make([]bool, l.n)}
			ops[op] = r
		}
		return r
	}
	fail := func(r *reduction, err error) {
		r.err = err
		for _, w := range r.waiting {
			w <- reply{err: err}
		}
		r.waiting = nil
	}
	// settled says every rank that may still arrive at failed reduction r
	// has had its answer: nobody is left to answer with r.err.
	settled := func(r *reduction) bool {
		for i, seen := range r.seen {
			if !seen && !dead[i] {
				return false
			}
		}
		return true
	}
	for {
		select {
		case <-l.stop:
			for _, r := range ops {
				fail(r, ErrClosed)
			}
			return
		case m := <-l.in:
			switch m := m.(type) {
			case arriveMsg:
				if dead[m.rank] && ops[m.op] == nil {
					// A failed rank arriving anyway begins nothing: the
					// others may be past this reduction, and an entry only
					// it had seen would be kept for ever.
					m.reply <- reply{err: failedAt(m.op)}
					continue
				}
				r := get(m.op)
				if r.seen[m.rank] {
					m.reply <- reply{err: fmt.Errorf("%w: rank %d arrived twice at reduction %d", ErrAborted, m.rank, m.op)}
					continue
				}
				r.seen[m.rank] = true
				r.arrived++
				switch {
				case failed != nil && r.err == nil:
					fail(r, failedAt(m.op))
					m.reply <- reply{err: r.err}
				case r.err != nil:
					m.reply <- reply{err: r.err}
				default:
					if r.arrived == 1 || m.v < r.min {
						r.min = m.v
					}
					r.waiting = append(r.waiting, m.reply)
					if r.arrived == l.n {
						for _, w := range r.waiting {
							w <- reply{v: r.min}
						}
						delete(ops, m.op)
						continue
					}
				}
				if r.err != nil && settled(r) {
					delete(ops, m.op)
				}
			case cancelMsg:
				if r := ops[m.op]; r != nil && r.err == nil {
					fail(r, &RankError{Rank: m.rank, Op: m.op, Err: m.err})
				}
			case failMsg:
				failed = &RankError{Rank: m.rank, Err: m.err}
				dead[m.rank] = true
				for op, r := range ops {
					if r.err == nil {
						fail(r, &RankError{Rank: m.rank, Op: op, Err: m.err})
					}
					if settled(r) {
						delete(ops, op)
					}
				}
			case pendingMsg:
				m <- len(ops)
			}
		}
	}
}

type localRank struct {
	l    *Local
	rank int
}

// AllReduceMin implements Collective.
func (c localRank) AllReduceMin(ctx context.Context, opID uint64, v int64) (int64, error) {
	if ctx == nil {
		return 0, ErrNilContext
	}
	rep := make(chan reply, 1)
	select {
	case c.l.in <- arriveMsg{rank: c.rank, op: opID, v: v, reply: rep}:
	case <-c.l.done:
		return 0, ErrClosed
	}
	select {
	case r := <-rep:
		return r.v, r.err
	case <-ctx.Done():
	}
	// Withdraw; the owner answers the arrival either way: with the result
	// when the reduction completed first, else with the failure it now is
	// for every rank.
	select {
	case c.l.in <- cancelMsg{rank: c.rank, op: opID, err: ctx.Err()}:
	case r := <-rep:
		return r.v, r.err
	case <-c.l.done:
	}
	r := <-rep // the owner answers every arrival, Close included
	return r.v, r.err
}
