package cachesim

import (
	"errors"
	"fmt"

	"github.com/kvtier/kvtier/trace"
)

// ErrNotChained is wrapped by CheckChained's error.
var ErrNotChained = errors.New("kvtier: cachesim: trace ids are not chained")

// CheckChained reports whether reqs' ids behave as chained block hashes: every
// id has exactly one predecessor wherever it appears (the id before it in the
// request, or none for a first id) and no id repeats within a request. Then an
// id stands for its whole prefix, every request is a root-to-node path of one
// forest, and OPT is exact. Both Mooncake traces and trace.Synthetic pass.
func CheckChained(reqs []trace.Request) error {
	// predecessor is an id's predecessor: the id before it, or none if it
	// is first in its request (a flag apart, so that any int64, -1
	// included, can be an id).
	type predecessor struct {
		id    int64
		first bool
	}
	name := func(p predecessor) string {
		if p.first {
			return "none (first)"
		}
		return fmt.Sprint(p.id)
	}
	pred := make(map[int64]predecessor)
	in := make(map[int64]int) // id -> last request index + 1 holding it
	for i, r := range reqs {
		for j, id := range r.HashIDs {
			if in[id] == i+1 {
				return fmt.Errorf("request %d repeats id %d: %w", i, id, ErrNotChained)
			}
			in[id] = i + 1
			p := predecessor{first: true}
			if j > 0 {
				p = predecessor{id: r.HashIDs[j-1]}
			}
			if old, ok := pred[id]; ok && old != p {
				return fmt.Errorf("request %d: id %d follows %s, earlier %s: %w", i, id, name(p), name(old), ErrNotChained)
			}
			pred[id] = p
		}
	}
	return nil
}

// PrefixIDs returns reqs with every id replaced by an id of its whole
// prefix: two positions get the same id exactly when their requests agree on
// every id up to there. This is what a cache keyed by chained block hashes
// (kvtier's, an engine's) tells apart, and the result is always chained, so
// OPT over it is that cache's exact optimum. On a chained trace it only
// renames the ids: every policy and OPT count the same hits. The new ids are
// 0, 1, ... in order of first appearance; reqs is not modified.
func PrefixIDs(reqs []trace.Request) []trace.Request {
	type edge struct{ parent, id int64 }
	const root = -1
	nodes := make(map[edge]int64)
	out := make([]trace.Request, len(reqs))
	for i, r := range reqs {
		out[i] = r
		ids := make([]int64, len(r.HashIDs))
		parent := int64(root)
		for j, id := range r.HashIDs {
			e := edge{parent, id}
			n, ok := nodes[e]
			if !ok {
				n = int64(len(nodes))
				nodes[e] = n
			}
			ids[j], parent = n, n
		}
		out[i].HashIDs = ids
	}
	return out
}

// PrefixBlocks is PrefixIDs with every group consecutive ids of a request
// taken as one block, for a cache whose blocks hold group of the trace's
// (a trace of 16-token ids against 512-token blocks: group 32). A block's id
// is that of its last id's prefix, so two blocks are equal exactly when the
// prefixes through them are; a request's last group of fewer ids is a
// partial block. The result is chained. group < 2 is PrefixIDs.
func PrefixBlocks(reqs []trace.Request, group int) []trace.Request {
	out := PrefixIDs(reqs)
	if group < 2 {
		return out
	}
	for i := range out {
		fine := out[i].HashIDs
		ids := make([]int64, 0, (len(fine)+group-1)/group)
		for j := group - 1; j < len(fine); j += group {
			ids = append(ids, fine[j])
		}
		if len(fine)%group != 0 {
			ids = append(ids, fine[len(fine)-1])
		}
		out[i].HashIDs = ids
	}
	return out
}
