package cachesim

import (
	"os"
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
