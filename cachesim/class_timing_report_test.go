package cachesim

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/trace"
)

// classAs wraps a hinted policy and rewrites the Class of every hint: the
// report below encodes the class a variant gives in the requests' output
// lengths, OutputLength 0 (class 1, which the shared traces never have)
// standing for "unknown" (class 0).
type classAs struct {
	policy.Hinted
	none bool // every class unknown
}

func (c classAs) class(h policy.Hint) policy.Hint {
	if c.none || h.Class == policy.OutputClass(0) {
		h.Class = 0
	}
	return h
}
func (c classAs) AddHint(k policy.Key, h policy.Hint)    { c.Hinted.AddHint(k, c.class(h)) }
func (c classAs) AccessHint(k policy.Key, h policy.Hint) { c.Hinted.AccessHint(k, c.class(h)) }

// TestReportClassTiming measures how much of Adaptive's gain from request
// classes rests on knowing a request's output length when its blocks are
// first added (cachesim adds them at the request's arrival; an engine
// learns the output length only when the request finishes). On the 81
// cells of TestReportAdaptiveHeldOut it runs the default Adaptive with:
//
//   - arrival: the class of the request itself, as cachesim gives it;
//   - none: no class at all (the eight earlier candidates' behaviour);
//   - previous: the class of the latest earlier request with the same first
//     block (a class known at arrival), unknown for a new root;
//   - shuffled: the output lengths permuted among the requests (a control:
//     the extra candidate without the signal).
//
// It prints, per variant, the cells below the best classic and the total
// hits. It runs only with KVTIER_CACHESIM_REPORT=1:
//
//	KVTIER_CACHESIM_REPORT=1 go test -run TestReportClassTiming -v ./cachesim
func TestReportClassTiming(t *testing.T) {
	if os.Getenv("KVTIER_CACHESIM_REPORT") != "1" {
		t.Skip("set KVTIER_CACHESIM_REPORT=1 to print the class-timing table")
	}
	ws := heldOutWorkloads(t)
	variants := []string{"arrival", "none", "previous", "shuffled"}
	relabel := func(reqs []trace.Request, v string) []trace.Request {
		out := make([]trace.Request, len(reqs))
		copy(out, reqs)
		switch v {
		case "previous":
			last := map[int64]int{}
			for i := range out {
				if len(reqs[i].HashIDs) == 0 {
					continue
				}
				root := reqs[i].HashIDs[0]
				prev, ok := last[root]
				out[i].OutputLength = 0 // unknown
				if ok {
					out[i].OutputLength = prev
				}
				last[root] = reqs[i].OutputLength
			}
		case "shuffled":
			rng := rand.New(rand.NewPCG(1, 2))
			perm := rng.Perm(len(out))
			for i := range out {
				out[i].OutputLength = reqs[perm[i]].OutputLength
			}
		}
		return out
	}
	below := map[string][]string{}
	hits := map[string]int64{}
	t.Logf("| workload | capacity | best classic | %s |", strings.Join(variants, " | "))
	for _, w := range ws {
		for _, r := range w.reqs {
			if r.OutputLength == 0 {
				t.Fatalf("%s has a request with no output: class 1 cannot stand for unknown", w.name)
			}
		}
		relabeled := map[string][]trace.Request{}
		for _, v := range variants {
			relabeled[v] = relabel(w.reqs, v)
		}
		for c := 256; c <= 1<<16; c *= 2 {
			best, _ := bestClassic(t, w.reqs, c)
			row := []string{}
			for _, v := range variants {
				p, err := policy.New(policy.Adaptive, c)
				if err != nil {
					t.Fatal(err)
				}
				res, err := SimulatePolicy(relabeled[v], c, classAs{p.(policy.Hinted), v == "none"}, Options{})
				if err != nil {
					t.Fatal(err)
				}
				hits[v] += res.Hits
				row = append(row, fmt.Sprintf("%.2f%% (%.3f)", 100*res.HitRatio, res.HitRatio/best.HitRatio))
				if res.Hits < best.Hits {
					below[v] = append(below[v], fmt.Sprintf("%s %d (%.3f)", w.name, c, res.HitRatio/best.HitRatio))
				}
			}
			t.Logf("| %s | %d | %.2f%% | %s |", w.name, c, 100*best.HitRatio, strings.Join(row, " | "))
		}
	}
	for _, v := range variants {
		t.Logf("%s: %d hits in all; below the best classic in %d of %d cells: %s", v, hits[v], len(below[v]), 9*len(ws), strings.Join(below[v], ", "))
	}
}
