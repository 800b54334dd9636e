package cachesim

import (
	"errors"
	"fmt"

	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/trace"
)

// ErrCapacity is returned for a capacity below one block.
var ErrCapacity = errors.New("kvtier: cachesim: capacity must be >= 1 block")

// Options tunes Simulate. The zero value touches ids in request order.
type Options struct {
	// ReverseTouch touches a request's ids from the last to the first, so
	// that the head of the prefix is the most recent. With LRU this keeps a
	// prefix's head longer than its tail.
	ReverseTouch bool
	// BlockTokens is the number of tokens one hash id stands for (0 means
	// trace.BlockTokens, Mooncake's 512). It only tells which blocks are
	// partial: a request's last block is partial when its InputLength is
	// not a multiple of BlockTokens.
	BlockTokens int
}

// Simulate replays reqs, in order, against one tier of capacity blocks run by
// a new policy of the given kind. For each request:
//
//  1. hits = the leading run of its ids resident before the request;
//  2. every id is touched, in request order (or reversed, see Options):
//     Access if resident, Add if not; a policy.Hinted policy gets AccessHint
//     and AddHint with the id's position in the request, whether it is
//     the partial last block, and the request's class (policy.OutputClass
//     of its output length);
//  3. victims are evicted, with no filter, until at most capacity ids are
//     resident.
//
// Step 3 runs after all of step 2, so a request longer than the tier first
// overfills it. Ids of the current request are not protected from eviction.
func Simulate(reqs []trace.Request, capacity int, kind policy.Kind, opts Options) (Result, error) {
	if capacity < 1 {
		return Result{}, fmt.Errorf("kvtier: cachesim: capacity %d: %w", capacity, ErrCapacity)
	}
	p, err := policy.New(kind, capacity)
	if err != nil {
		return Result{}, fmt.Errorf("kvtier: cachesim: %w", err)
	}
	return SimulatePolicy(reqs, capacity, p, opts)
}

// SimulatePolicy is Simulate with a caller-built policy, for policies New does
// not know. p is used as it is (a non-empty p starts warm) and is left holding
// the final resident set; the caller keeps ownership.
func SimulatePolicy(reqs []trace.Request, capacity int, p policy.Policy, opts Options) (Result, error) {
	if capacity < 1 {
		return Result{}, fmt.Errorf("kvtier: cachesim: capacity %d: %w", capacity, ErrCapacity)
	}
	if p == nil {
		return Result{}, errors.New("kvtier: cachesim: nil policy")
	}
	blockTokens := opts.blockTokens()
	resident := func(id int64) bool { return p.Contains(policy.Key(id)) }
	hinted, _ := p.(policy.Hinted)
	var r trace.Request // the request being replayed
	var class uint8     // its class, for hinted policies
	touch := func(j int) {
		k := policy.Key(r.HashIDs[j])
		if hinted != nil {
			h := policy.Hint{Depth: j, Partial: j == len(r.HashIDs)-1 && r.InputLength%blockTokens != 0, Class: class}
			if p.Contains(k) {
				hinted.AccessHint(k, h)
			} else {
				hinted.AddHint(k, h)
			}
			return
		}
		if p.Contains(k) {
			p.Access(k)
		} else {
			p.Add(k)
		}
	}
	var res Result
	for _, r = range reqs {
		class = policy.OutputClass(r.OutputLength)
		res.count(&r, leadingRun(r.HashIDs, resident), blockTokens)
		if opts.ReverseTouch {
			for j := len(r.HashIDs) - 1; j >= 0; j-- {
				touch(j)
			}
		} else {
			for j := range r.HashIDs {
				touch(j)
			}
		}
		for p.Len() > capacity {
			if _, ok := p.Evict(nil); !ok {
				return res, fmt.Errorf("kvtier: cachesim: %v policy holds %d keys over capacity %d and evicts none",
					p.Kind(), p.Len(), capacity)
			}
			res.Evictions++
		}
	}
	res.finish()
	return res, nil
}
