package cachesim

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/trace"
)

// TestReportFullTraces prints LRU, FIFO, S3-FIFO, ARC and OPT hit ratios on the
// shared Mooncake traces and the default synthetic trace, with best/OPT (the
// best online policy over OPT) per capacity. It runs only with KVTIER_CACHESIM_REPORT=1:
//
//	KVTIER_CACHESIM_REPORT=1 go test -run TestReportFullTraces -v ./cachesim
func TestReportFullTraces(t *testing.T) {
	if os.Getenv("KVTIER_CACHESIM_REPORT") != "1" {
		t.Skip("set KVTIER_CACHESIM_REPORT=1 to print the hit-ratio table")
	}
	files := []struct {
		name string
		caps []int
	}{
		{"conversation_trace.jsonl", []int{1 << 10, 4 << 10, 16 << 10, 64 << 10}},
		{"synthetic_trace.jsonl", []int{1 << 10, 4 << 10, 16 << 10, 64 << 10}},
		{"trace.Synthetic(DefaultSyntheticConfig())", []int{1 << 10, 4 << 10, 16 << 10, 64 << 10}},
	}
	gen, err := trace.Synthetic(trace.DefaultSyntheticConfig())
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		reqs := gen
		if f.name != "trace.Synthetic(DefaultSyntheticConfig())" {
			reqs = readShared(t, f.name)
		}
		inf := Infinite(reqs)
		t.Logf("%s: %d requests, %d refs, ideal %.2f%%, chained: %v", f.name, len(reqs), inf.BlockRefs, 100*inf.HitRatio, CheckChained(reqs))
		t.Logf("| capacity | LRU | LRU rev | FIFO | S3-FIFO | ARC | OPT | ARC/OPT | best/OPT | OPT time |")
		for _, c := range f.caps {
			var row [5]float64
			for i, run := range []struct {
				k   policy.Kind
				rev bool
			}{{policy.LRU, false}, {policy.LRU, true}, {policy.FIFO, false}, {policy.S3FIFO, false}, {policy.ARC, false}} {
				r, err := Simulate(reqs, c, run.k, Options{ReverseTouch: run.rev})
				if err != nil {
					t.Fatal(err)
				}
				row[i] = r.HitRatio
			}
			start := time.Now()
			opt := OPT(reqs, c)
			took := time.Since(start)
			best := max(row[0], row[1], row[2], row[3], row[4])
			t.Logf("| %dk | %.2f%% | %.2f%% | %.2f%% | %.2f%% | %.2f%% | %.2f%% | %.3f | %.3f | %v |", c>>10,
				100*row[0], 100*row[1], 100*row[2], 100*row[3], 100*row[4], 100*opt.HitRatio,
				row[4]/opt.HitRatio, best/opt.HitRatio, took.Round(time.Millisecond))
		}
	}
}

// readShared reads a trace from /work/shared/traces, or skips the test.
func readShared(t testing.TB, name string) []trace.Request {
	t.Helper()
	path := "../../shared/traces/" + name
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s not present: %v", path, err)
	}
	reqs, _, err := trace.ReadFile(path, trace.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return reqs
}

// TestReportAdaptiveGenerated prints, for trace.Synthetic workloads of
// several shapes, the best classic policy's hit ratio, Adaptive's, their
// ratio and OPT per capacity. Adaptive's constants were chosen on the two
// shared Mooncake traces; of these workloads only the default one guarded
// them (TestAdaptiveAtLeastBestClassic) while they were chosen. It runs
// only with KVTIER_CACHESIM_REPORT=1:
//
//	KVTIER_CACHESIM_REPORT=1 go test -run TestReportAdaptiveGenerated -v ./cachesim
func TestReportAdaptiveGenerated(t *testing.T) {
	if os.Getenv("KVTIER_CACHESIM_REPORT") != "1" {
		t.Skip("set KVTIER_CACHESIM_REPORT=1 to print the generated-workload table")
	}
	workloads := []struct {
		name string
		mod  func(*trace.SyntheticConfig)
	}{
		{"default", func(*trace.SyntheticConfig) {}},
		{"16 open conversations", func(c *trace.SyntheticConfig) { c.Concurrency = 16 }},
		{"1024 open, 3000 sessions", func(c *trace.SyntheticConfig) { c.Concurrency, c.Sessions = 1024, 3000 }},
		{"no system prompts", func(c *trace.SyntheticConfig) { c.SystemPrompts = 0 }},
		{"64 system prompts", func(c *trace.SyntheticConfig) { c.SystemPrompts = 64 }},
		{"1-2 turns, 4000 sessions", func(c *trace.SyntheticConfig) { c.Turns, c.Sessions = trace.IntRange{Min: 1, Max: 2}, 4000 }},
		{"8-20 turns, 400 sessions", func(c *trace.SyntheticConfig) { c.Turns, c.Sessions = trace.IntRange{Min: 8, Max: 20}, 400 }},
		{"seed 7", func(c *trace.SyntheticConfig) { c.Seed = 7 }},
	}
	t.Logf("| workload | capacity | best classic | adaptive | adaptive/best | OPT |")
	for _, w := range workloads {
		reqs := synthetic(t, w.mod)
		for _, c := range []int{256, 1024, 4096, 16384} {
			best, bestKind := bestClassic(t, reqs, c)
			a := mustSimulate(t, reqs, c, policy.Adaptive, Options{})
			t.Logf("| %s | %d | %v %.2f%% | %.2f%% | %.3f | %.2f%% |", w.name, c, bestKind, 100*best.HitRatio,
				100*a.HitRatio, a.HitRatio/best.HitRatio, 100*OPT(reqs, c).HitRatio)
		}
	}
}

// TestReportAdaptiveHeldOut prints the 81 cells Adaptive's vote was judged
// on (policy/adaptive.go, voteBand): both shared traces, each one's first
// and second half, and three trace.Synthetic workloads (the default with
// 1,500 sessions, seeds 1-3), at capacities 256 to 64k blocks, with the
// best classic policy's hit ratio, Adaptive's and their ratio, then the
// cells below the best classic. It runs only with KVTIER_CACHESIM_REPORT=1
// (43 s on a 2-core VM):
//
//	KVTIER_CACHESIM_REPORT=1 go test -run TestReportAdaptiveHeldOut -v ./cachesim
func TestReportAdaptiveHeldOut(t *testing.T) {
	if os.Getenv("KVTIER_CACHESIM_REPORT") != "1" {
		t.Skip("set KVTIER_CACHESIM_REPORT=1 to print the held-out table")
	}
	ws := heldOutWorkloads(t)
	var below []string
	t.Logf("| workload | capacity | best classic | adaptive | adaptive/best |")
	for _, w := range ws {
		for c := 256; c <= 1<<16; c *= 2 {
			best, bestKind := bestClassic(t, w.reqs, c)
			a := mustSimulate(t, w.reqs, c, policy.Adaptive, Options{})
			t.Logf("| %s | %d | %v %.2f%% | %.2f%% | %.3f |", w.name, c, bestKind, 100*best.HitRatio, 100*a.HitRatio, a.HitRatio/best.HitRatio)
			if a.Hits < best.Hits {
				below = append(below, fmt.Sprintf("%s %d (%.3f)", w.name, c, a.HitRatio/best.HitRatio))
			}
		}
	}
	t.Logf("below the best classic in %d of %d cells: %s", len(below), 9*len(ws), strings.Join(below, ", "))
}

// TestReportAdaptiveCandidates prints, on both shared traces, the hit ratio
// of each of Adaptive's default rankings run alone (no shadows, nothing
// adapts) beside the default Adaptive and the best classic policy, per
// capacity: where Adaptive trails a single ranking, the loss is in choosing.
// It also runs the default Adaptive without hints, as the tiers call it
// (Add and Access only: no chain depth, no partial last block).
// It runs only with KVTIER_CACHESIM_REPORT=1 (about half a minute):
//
//	KVTIER_CACHESIM_REPORT=1 go test -run TestReportAdaptiveCandidates -v ./cachesim
func TestReportAdaptiveCandidates(t *testing.T) {
	if os.Getenv("KVTIER_CACHESIM_REPORT") != "1" {
		t.Skip("set KVTIER_CACHESIM_REPORT=1 to print the per-candidate table")
	}
	cands := policy.DefaultAdaptiveConfig().Candidates
	names := make([]string, len(cands))
	rank := map[policy.Ranking]string{
		policy.RankSecondUse:         "second-use",
		policy.RankFrequency:         "frequency",
		policy.RankFrequencyNewFirst: "frequency, new first",
	}
	for i, c := range cands {
		names[i] = fmt.Sprintf("%s W=%v", rank[c.Rank], c.Window)
		if c.Class {
			names[i] += " + classes"
		}
	}
	t.Logf("| trace | capacity | best classic | adaptive | adaptive, no hints | %s |", strings.Join(names, " | "))
	for _, file := range []string{"conversation_trace.jsonl", "synthetic_trace.jsonl"} {
		reqs := readShared(t, file)
		for _, c := range []int{256, 1024, 2048, 4096, 16384, 65536} {
			best, bestKind := bestClassic(t, reqs, c)
			p, err := policy.New(policy.Adaptive, c)
			if err != nil {
				t.Fatal(err)
			}
			plain, err := SimulatePolicy(reqs, c, unhinted{p}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			row := fmt.Sprintf("| %s | %d | %v %.2f%% | %.2f%% | %.2f%% |", file, c, bestKind, 100*best.HitRatio,
				100*mustSimulate(t, reqs, c, policy.Adaptive, Options{}).HitRatio, 100*plain.HitRatio)
			for _, cand := range cands {
				p, err := policy.NewAdaptive(c, policy.AdaptiveConfig{Candidates: []policy.Candidate{cand}})
				if err != nil {
					t.Fatal(err)
				}
				r, err := SimulatePolicy(reqs, c, p, Options{})
				if err != nil {
					t.Fatal(err)
				}
				row += fmt.Sprintf(" %.2f%% |", 100*r.HitRatio)
			}
			t.Log(row)
		}
	}
}

// unhinted hides a policy's Hinted methods, so that SimulatePolicy calls
// only Add and Access, as the tiers do.
type unhinted struct{ policy.Policy }

// TestReportClassReuse prints, per request class (policy.OutputClass of the
// output length), how many blocks requests of that class saw first and
// what share of them a later request used again: the signal Adaptive's
// class candidate learns online. It runs only with KVTIER_CACHESIM_REPORT=1:
//
//	KVTIER_CACHESIM_REPORT=1 go test -run TestReportClassReuse -v ./cachesim
func TestReportClassReuse(t *testing.T) {
	if os.Getenv("KVTIER_CACHESIM_REPORT") != "1" {
		t.Skip("set KVTIER_CACHESIM_REPORT=1 to print the per-class reuse table")
	}
	for _, name := range []string{"conversation_trace.jsonl", "synthetic_trace.jsonl"} {
		reqs := readShared(t, name)
		born := map[int64]uint8{} // id -> class of the request that saw it first
		again := map[int64]bool{}
		for _, r := range reqs {
			c := policy.OutputClass(r.OutputLength)
			for _, id := range r.HashIDs {
				if _, ok := born[id]; ok {
					again[id] = true
				} else {
					born[id] = c
				}
			}
		}
		var n, reused [256]int
		for id, c := range born {
			n[c]++
			if again[id] {
				reused[c]++
			}
		}
		t.Logf("%s: | class (output tokens) | blocks first seen | used again |", name)
		for c := range n {
			if n[c] > 0 {
				lo, hi := 0, 0
				if c > 1 {
					lo, hi = 1<<(c-2), 1<<(c-1)-1
				}
				t.Logf("| %d (%d–%d) | %d | %.1f%% |", c, lo, hi, n[c], 100*float64(reused[c])/float64(n[c]))
			}
		}
	}
}

// workload is a named request sequence of the held-out reports.
type workload struct {
	name string
	reqs []trace.Request
}

// heldOutWorkloads are the workloads of TestReportAdaptiveHeldOut: both
// shared traces, each one's first and second half, and three generated
// workloads (1,500 sessions, seeds 1-3).
func heldOutWorkloads(t *testing.T) []workload {
	var ws []workload
	for _, f := range []string{"conversation", "synthetic"} {
		r := readShared(t, f+"_trace.jsonl")
		ws = append(ws, workload{f, r}, workload{f + " first half", r[:len(r)/2]}, workload{f + " second half", r[len(r)/2:]})
	}
	for seed := uint64(1); seed <= 3; seed++ {
		ws = append(ws, workload{fmt.Sprintf("generated, seed %d", seed), synthetic(t, func(c *trace.SyntheticConfig) {
			c.Seed, c.Sessions = seed, 1500
		})})
	}
	return ws
}
