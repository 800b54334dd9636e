package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeTrace writes a Mooncake-format trace of 16-token blocks, one request
// per hash-id chain, and returns its path.
func writeTrace(t *testing.T, chains [][]int) string {
	t.Helper()
	var b strings.Builder
	for i, c := range chains {
		ids, err := json.Marshal(c)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": 1, "hash_ids": %s}`+"\n", i, 16*len(c), ids)
	}
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// runTraceSuite runs the trace suite with -json on path at one capacity and
// returns the report it printed, and that report as the human table.
func runTraceSuite(t *testing.T, path string, capacity int) (*Report, string) {
	t.Helper()
	var out bytes.Buffer
	args := []string{"-json", "-suite", "trace", "-capacity", fmt.Sprint(capacity), "-trace", path, "-trace-block-tokens", "16"}
	if err := run(context.Background(), args, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("-json output: %v\n%s", err, out.String())
	}
	var human bytes.Buffer
	if err := writeHuman(&human, &rep); err != nil {
		t.Fatal(err)
	}
	return &rep, human.String()
}

// traceRow returns the table row of capacity in the human output.
func traceRow(t *testing.T, out string, capacity int) []string {
	t.Helper()
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == fmt.Sprint(capacity) {
			return f
		}
	}
	t.Fatalf("no row for capacity %d:\n%s", capacity, out)
	return nil
}

// TestReportAdaptiveHitsWhereNoClassicDoes replays a trace where, in a
// one-block cache, every classic policy keeps the newest block (a request's
// private tail) and misses each stem's second use, while Adaptive evicts
// descendants first, keeps the stem and hits. adaptive/best is then
// infinite: the table says inf, the JSON holds null and a flag, and the
// target passes.
func TestReportAdaptiveHitsWhereNoClassicDoes(t *testing.T) {
	var chains [][]int
	for i := range 10 {
		for j := range 2 {
			chains = append(chains, []int{100 + i, 1000 + 2*i + j})
		}
	}
	path := writeTrace(t, chains)

	rep, out := runTraceSuite(t, path, 1)
	c := rep.Trace.Capacities[0]
	for _, k := range classicPolicies {
		if h := c.HitRatio[policyName(k)]; h != 0 {
			t.Fatalf("precondition: %v hits %v of the refs, want 0 (the trace no longer isolates the case)", k, h)
		}
	}
	if c.HitRatio["adaptive"] <= 0 {
		t.Fatalf("precondition: adaptive hits %v, want > 0", c.HitRatio["adaptive"])
	}
	if c.AdaptiveOverBest != nil || !c.AdaptiveOverBestInfinite {
		t.Errorf("adaptive_over_best %v, infinite %v: want null and true", c.AdaptiveOverBest, c.AdaptiveOverBestInfinite)
	}
	if len(rep.Targets) != 1 {
		t.Fatalf("targets %+v, want one", rep.Targets)
	}
	if tg := rep.Targets[0]; tg.Status != "PASS" || tg.Value != nil || !tg.Infinite {
		t.Errorf("target %+v (value %v): want PASS, value null, infinite", tg, tg.Value)
	}

	if c.BestPolicy != "" || c.BestOverOPT == nil || *c.BestOverOPT != 0 {
		t.Errorf("best_policy %q, best_over_opt %v: want \"\" (no classic hits) and 0", c.BestPolicy, c.BestOverOPT)
	}
	row := traceRow(t, out, 1)
	if best := row[len(row)-6]; best != "-" {
		t.Errorf("best classic column %q, want - (no classic policy hits):\n%s", best, out)
	}
	if adaptiveOverBest := row[len(row)-3]; adaptiveOverBest != "inf" {
		t.Errorf("adaptive/best column %q, want inf:\n%s", adaptiveOverBest, out)
	}
	if !strings.Contains(out, "adaptive_over_best_classic@1  inf >= 1.10  PASS") {
		t.Errorf("target line does not print inf and PASS:\n%s", out)
	}
}

// TestReportNoPolicyHits replays a trace that never reuses a block: no
// policy hits, adaptive/best is 0/0 and the target has nothing to judge.
// OPT does not hit either: best/opt and adaptive/opt are 0/0 too, null in
// the JSON and n/a in the table (they printed 0.000, as if OPT had hits no
// policy got), and no classic policy is named best (lru was, with none).
func TestReportNoPolicyHits(t *testing.T) {
	var chains [][]int
	for i := range 20 {
		chains = append(chains, []int{2 * i, 2*i + 1})
	}
	path := writeTrace(t, chains)

	rep, out := runTraceSuite(t, path, 4)
	c := rep.Trace.Capacities[0]
	if c.AdaptiveOverBest != nil || c.AdaptiveOverBestInfinite {
		t.Errorf("adaptive_over_best %v, infinite %v: want null and false", c.AdaptiveOverBest, c.AdaptiveOverBestInfinite)
	}
	if tg := rep.Targets[0]; tg.Status != "N/A" || tg.Value != nil || tg.Infinite {
		t.Errorf("target %+v: want N/A, value null, not infinite", tg)
	}
	if c.OPTHitRatio != 0 || c.BestOverOPT != nil || c.AdaptiveOverOPT != nil || c.BestPolicy != "" {
		t.Errorf("opt %v, best_over_opt %v, adaptive_over_opt %v, best_policy %q: want 0, null, null, \"\"",
			c.OPTHitRatio, c.BestOverOPT, c.AdaptiveOverOPT, c.BestPolicy)
	}
	row := traceRow(t, out, 4)
	if adaptiveOverBest := row[len(row)-3]; adaptiveOverBest != "n/a" {
		t.Errorf("adaptive/best column %q, want n/a:\n%s", adaptiveOverBest, out)
	}
	if best, bestOverOPT, adaptiveOverOPT := row[len(row)-6], row[len(row)-5], row[len(row)-4]; best != "-" || bestOverOPT != "n/a" || adaptiveOverOPT != "n/a" {
		t.Errorf("best classic %q, best/opt %q, adaptive/opt %q: want -, n/a, n/a:\n%s", best, bestOverOPT, adaptiveOverOPT, out)
	}
}

// TestReportTargetsJSONFinite checks that a target over a zero reference
// still encodes: JSON has no Inf or NaN.
func TestReportTargetsJSONFinite(t *testing.T) {
	rep := &Report{Copy: &CopyResult{D2HGBps: 1, H2DGBps: 0}}
	rep.Targets = targets(rep)
	var out bytes.Buffer
	if err := writeJSON(&out, rep); err != nil {
		t.Fatalf("a target over a zero reference breaks the JSON: %v", err)
	}
	for _, tg := range rep.Targets {
		switch tg.Name {
		case "d2h_gbps/memmove_gbps": // 1/0
			if !tg.Infinite || tg.Value != nil || tg.Status != "PASS" {
				t.Errorf("%s: %+v, want infinite and PASS", tg.Name, tg)
			}
		case "h2d_gbps/memmove_gbps": // 0/0
			if tg.Infinite || tg.Value != nil || tg.Status != "N/A" {
				t.Errorf("%s: %+v, want null and N/A", tg.Name, tg)
			}
		}
	}
}

// TestReportDiskTargetsNameTheirValue checks that the disk targets are named
// after the figure they hold, the median of per-round ratios (write_ratio,
// read_ratio), which differs from the ratio of the median rates.
func TestReportDiskTargetsNameTheirValue(t *testing.T) {
	rep := &Report{Copy: &CopyResult{MemmoveGBps: 1, D2HGBps: 1, H2DGBps: 1, Disk: &DiskResult{
		RawWriteGBps: 2, DiskWriteGBps: 1.9, WriteRatio: 0.8,
		RawReadGBps: 1, DiskReadGBps: 0.5, ReadRatio: 0.95,
	}}}
	got := map[string]Target{}
	for _, tg := range targets(rep) {
		got[tg.Name] = tg
		if strings.Contains(tg.Name, "raw_write_gbps") || strings.Contains(tg.Name, "raw_read_gbps") {
			t.Errorf("target %q is named as a quotient of rates but holds a median of per-round ratios", tg.Name)
		}
	}
	for name, want := range map[string]struct {
		v      float64
		status string
	}{"disk_write_ratio": {0.8, "MISS"}, "disk_read_ratio": {0.95, "PASS"}} {
		tg, ok := got[name]
		if !ok {
			t.Errorf("no target %s in %v", name, got)
			continue
		}
		if tg.Value == nil || *tg.Value != want.v || tg.Status != want.status {
			t.Errorf("%s: %+v, want %v %s", name, tg, want.v, want.status)
		}
	}
}

// TestTraceSuiteTakesIdsByPrefix: on a trace whose ids are not chained (id 2
// follows 5 in one request and 1 in another), a block is a hit only where
// the prefix through it was met before, as a cache keyed by chained hashes
// (kvtier's, an engine's) tells blocks apart, and OPT is then exact. The
// third request [1, 2] follows [5, 2] and [1, 7]: its 1 hits, its 2 does
// not, as the prefix [1, 2] was never computed. Before, the suite replayed
// the raw ids, and every policy, OPT and the unbounded cache counted both
// (2/6 of the block refs instead of 1/6): hit ratios no prefix cache can get.
func TestTraceSuiteTakesIdsByPrefix(t *testing.T) {
	rep, human := runTraceSuite(t, writeTrace(t, [][]int{{5, 2}, {1, 7}, {1, 2}}), 64)
	tr := rep.Trace
	if tr == nil || tr.Chained || len(tr.Capacities) != 1 {
		t.Fatalf("trace result %+v, want one capacity of a trace reported not chained", tr)
	}
	const want = 1.0 / 6
	c := tr.Capacities[0]
	for name, got := range c.HitRatio {
		if got != want {
			t.Errorf("%s: hit ratio %v, want %v", name, got, want)
		}
	}
	if c.OPTHitRatio != want || c.InfiniteHitRatio != want || tr.InfiniteHitRatio != want {
		t.Errorf("opt %v, infinite %v (%v), want %v", c.OPTHitRatio, c.InfiniteHitRatio, tr.InfiniteHitRatio, want)
	}
	if !strings.Contains(human, "by prefix") {
		t.Errorf("the table does not say the ids were taken by prefix:\n%s", human)
	}
}
