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
	const none = -1
	pred := make(map[int64]int64)
	in := make(map[int64]int) // id -> last request index + 1 holding it
	for i, r := range reqs {
		for j, id := range r.HashIDs {
			if in[id] == i+1 {
				return fmt.Errorf("request %d repeats id %d: %w", i, id, ErrNotChained)
			}
			in[id] = i + 1
			p := int64(none)
			if j > 0 {
				p = r.HashIDs[j-1]
			}
			if old, ok := pred[id]; ok && old != p {
				return fmt.Errorf("request %d: id %d follows %d, earlier %d (-1: first): %w", i, id, p, old, ErrNotChained)
			}
			pred[id] = p
		}
	}
	return nil
}
