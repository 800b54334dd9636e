package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/cachesim"
	"github.com/kvtier/kvtier/trace"
)

// smallTrace writes a synthetic multi-turn trace, small enough for -race, to
// a JSONL file and returns its path and requests.
func smallTrace(t *testing.T) (string, []trace.Request) {
	t.Helper()
	cfg := trace.DefaultSyntheticConfig()
	cfg.Sessions, cfg.Concurrency, cfg.RatePerSecond = 20, 6, 10
	cfg.Turns = trace.IntRange{Min: 1, Max: 4}
	cfg.SystemPrompts, cfg.SystemTokens = 2, trace.IntRange{Min: 1024, Max: 2048}
	cfg.UserTokens, cfg.OutputTokens = trace.IntRange{Min: 256, Max: 1024}, trace.IntRange{Min: 2, Max: 12}
	cfg.MaxInputTokens = 6144
	reqs, err := trace.Synthetic(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, r := range reqs {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	path := filepath.Join(t.TempDir(), "small.jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, reqs
}

// smallArgs are capacities for smallTrace: the GPU holds about one long prompt
// and evicts, pinned memory a few conversations, the disk all of them.
func smallArgs(path string) []string {
	return []string{"-trace", path, "-block-tokens", "128", "-gpu-blocks", "64", "-pinned-blocks", "160", "-disk-blocks", "1024",
		"-max-batched-tokens", "2048", "-time-scale", "1", "-vocab", "5000"}
}

// TestTiers replays the small trace through every configuration twice and a
// bigger GPU once: the same inputs give the same numbers, more tier capacity
// never computes more prefill tokens, and the TTFTs recovered for the plot
// agree with the scheduler's percentiles.
func TestTiers(t *testing.T) {
	path, reqs := smallTrace(t)
	o, err := parseFlags(smallArgs(path), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	root := t.TempDir()
	run := func(o options, ts tierSet) outcome {
		t.Helper()
		out, err := replay(ctx, o, ts, reqs, root, nil)
		if err != nil {
			t.Fatal(err)
		}
		if out.res.Requests != len(reqs) {
			t.Fatalf("%s: %d of %d requests finished", ts, out.res.Requests, len(reqs))
		}
		return out
	}
	prefill := map[string]int64{}
	for _, ts := range []tierSet{gpuOnly, withPinned, withDisk} {
		a, b := run(o, ts), run(o, ts)
		if !reflect.DeepEqual(a.res, b.res) || !reflect.DeepEqual(a.ttfts, b.ttfts) ||
			!reflect.DeepEqual(links(a.stats, 1), links(b.stats, 1)) {
			t.Errorf("%s: two runs differ:\n%+v\n%+v\nlinks %v vs %v", ts, a.res, b.res, links(a.stats, 1), links(b.stats, 1))
		}
		checkTTFTs(t, ts.String(), a)
		// Each tier's hits saved prefill compute, and only where it served tokens.
		saved, res := a.res.PrefillSaved, a.res
		for _, tier := range []struct {
			name   string
			tokens int64
			saved  time.Duration
		}{{"gpu", res.GPUTokens, saved.GPU}, {"pinned", res.PinnedTokens, saved.Pinned}, {"disk", res.DiskTokens, saved.Disk}} {
			if (tier.tokens > 0) != (tier.saved > 0) {
				t.Errorf("%s: %d tokens from %s saved %v of prefill", ts, tier.tokens, tier.name, tier.saved)
			}
		}
		if a.busy <= 0 || a.busy > a.res.Duration {
			t.Errorf("%s: GPU busy %v of a %v run", ts, a.busy, a.res.Duration)
		}
		prefill[ts.String()] = a.res.PrefillTokens
		t.Logf("%s: prefill %d, hits gpu %d pinned %d disk %d, links %v", ts, a.res.PrefillTokens,
			a.res.GPUTokens, a.res.PinnedTokens, a.res.DiskTokens, links(a.stats, 1))
	}
	big := o
	big.gpuBlocks *= 2
	prefill["gpu x2"] = run(big, gpuOnly).res.PrefillTokens
	t.Logf("prefill tokens: %v", prefill)
	// A tier added never costs more than 3% more prefill: not zero, since
	// with a disk below, the pinned tier keeps up to a quarter of its slots
	// free ahead of need (drained to disk), which a small pinned tier feels
	// (2.1% here once offloads ahead of need kept the GPU's eviction order).
	for _, pair := range [][2]string{{"gpu", "gpu+pinned"}, {"gpu+pinned", "gpu+pinned+disk"}, {"gpu", "gpu x2"}} {
		if float64(prefill[pair[1]]) > 1.03*float64(prefill[pair[0]]) {
			t.Errorf("%s computes %d prefill tokens, more than %s (%d)", pair[1], prefill[pair[1]], pair[0], prefill[pair[0]])
		}
	}
	if prefill["gpu+pinned+disk"] >= prefill["gpu"] {
		t.Errorf("the lower tiers saved no prefill: %v", prefill)
	}
}

// checkTTFTs: one TTFT per request, with the scheduler's own percentiles.
func checkTTFTs(t *testing.T, name string, out outcome) {
	t.Helper()
	if len(out.ttfts) != out.res.Requests {
		t.Errorf("%s: %d TTFTs for %d requests", name, len(out.ttfts), out.res.Requests)
		return
	}
	s := slices.Clone(out.ttfts)
	slices.Sort(s)
	rank := func(p float64) time.Duration { return s[max(int(math.Ceil(p*float64(len(s))))-1, 0)] }
	got := [4]time.Duration{rank(0.5), rank(0.9), rank(0.99), s[len(s)-1]}
	want := [4]time.Duration{out.res.TTFT.P50, out.res.TTFT.P90, out.res.TTFT.P99, out.res.TTFT.Max}
	if got != want {
		t.Errorf("%s: recovered TTFT p50/p90/p99/max %v, scheduler says %v", name, got, want)
	}
}

// TestRunJSONAndPlot runs the command end to end: -json - puts parseable JSON
// alone on stdout and the table on stderr, and the plot is written.
func TestRunJSONAndPlot(t *testing.T) {
	path, reqs := smallTrace(t)
	dir := t.TempDir()
	png := filepath.Join(dir, "demo.png")
	stale := staleRoot(t, dir) // a killed run's
	var stdout, stderr bytes.Buffer
	args := append(smallArgs(path), "-json", "-", "-plot", png, "-disk-dir", dir, "-progress")
	if err := run(context.Background(), args, &stdout, &stderr, false); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var rep jsonReport
	if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, stdout.String())
	}
	if len(rep.Configs) != 3 || rep.TraceRequests != len(reqs) {
		t.Fatalf("JSON has %d configs for %d requests, want 3 for %d", len(rep.Configs), rep.TraceRequests, len(reqs))
	}
	for i, name := range []string{"gpu", "gpu+pinned", "gpu+pinned+disk"} {
		c := rep.Configs[i]
		if c.Name != name || c.Requests != len(reqs) || c.PromptTokens == 0 || len(c.Series) == 0 || len(c.Links) != 4 || c.TTFTMillis.P50 <= 0 {
			t.Errorf("config %d: %+v", i, c)
		}
	}
	if c := rep.Configs[2]; c.DiskTokens == 0 || c.Links[2].Blocks == 0 {
		t.Errorf("the disk configuration served no disk tokens or wrote no disk blocks: %+v", c)
	}
	// The clairvoyant reference grows with the total capacity and is what
	// cachesim.OPT gives at it.
	inf := cachesim.Infinite(reqs).TokenHitRatio
	for i, c := range rep.Configs {
		total := (c.GPUBlocks + c.PinnedBlocks + c.DiskBlocks) * rep.BlockTokens / trace.BlockTokens
		if want := cachesim.OPT(reqs, total).TokenHitRatio; c.OPTHitRatio != want || want <= 0 || want > inf {
			t.Errorf("config %s: opt_hit_ratio %v, want OPT at %d ids = %v (infinite %v)", c.Name, c.OPTHitRatio, total, want, inf)
		}
		if i > 0 && c.OPTHitRatio < rep.Configs[i-1].OPTHitRatio {
			t.Errorf("config %s: OPT %v below the smaller configuration's %v", c.Name, c.OPTHitRatio, rep.Configs[i-1].OPTHitRatio)
		}
	}
	table := stderr.String()
	for _, want := range []string{"gpu+pinned+disk", "prefill tokens computed", "OPT at total capacity", "hit ratio / OPT", "TTFT p99", "pinned -> disk", "plot: " + png,
		"removed " + stale} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	if !strings.Contains(table, "] ") || !strings.Contains(table, "requests, modelled time") {
		t.Errorf("-progress drew no progress bar:\n%s", table)
	}
	b, err := os.ReadFile(png)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 1000 || !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
		t.Fatalf("plot: %d bytes, not a PNG", len(b))
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 1 {
		t.Errorf("-disk-dir holds %v after the run (%v), want only the plot: the disk tier's directory and the stale one are removed", entries, err)
	}
}

func TestPlotSVG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.svg")
	out := outcome{tiers: gpuOnly, ttfts: []time.Duration{time.Millisecond, 20 * time.Millisecond, time.Second}}
	if err := writePlot(path, []outcome{out}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Fatalf("svg plot: %v, %.60q", err, b)
	}
	if err := writePlot(filepath.Join(t.TempDir(), "p.gif"), []outcome{out}); err == nil {
		t.Fatal("a .gif plot: no error")
	}
}

func TestDefaults(t *testing.T) {
	o, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(o.configs, []tierSet{gpuOnly, withPinned, withDisk}) || o.gpuBlocks != defaultGPUBlocks ||
		o.pinnedBlocks != defaultPinnedBlocks || o.diskBlocks != defaultDiskBlocks || o.blockTokens != 512 ||
		o.timeScale != 0 || o.load != defaultLoad || !o.sync || o.plotPath == "" || o.jsonPath != "" || o.tracePath != "" ||
		o.offloadAhead != 64 || o.serialOffloads {
		t.Fatalf("defaults: %+v", o)
	}
	// -offload-ahead reaches the Manager's configuration.
	o, err = parseFlags([]string{"-offload-ahead", "7"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := managerConfig(o, withPinned, ""); err != nil || c.OffloadAhead != 7 || c.SerialOffloads {
		t.Fatalf("managerConfig with -offload-ahead 7: OffloadAhead %d, SerialOffloads %v, err %v", c.OffloadAhead, c.SerialOffloads, err)
	}
	o, err = parseFlags([]string{"-serial-offloads"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c, err := managerConfig(o, withPinned, ""); err != nil || !c.SerialOffloads {
		t.Fatalf("managerConfig with -serial-offloads: SerialOffloads %v, err %v", c.SerialOffloads, err)
	}
}

func TestFlagErrors(t *testing.T) {
	for _, args := range [][]string{
		{"-gpu-blocks", "0"}, {"-gpu-blocks", "x"}, {"-block-tokens", "0"}, {"-pinned-blocks", "0"},
		{"-pinned-blocks", "0", "-configs", "gpu,disk"}, {"-disk-blocks", "-1"},
		{"-configs", "gpu,tape"}, {"-configs", "gpu,gpu"}, {"-configs", ""},
		{"-pinned-policy", "mru"}, {"-disk-policy", "random"}, {"-ingestion", "some"}, {"-disk-ingestion", "never"},
		{"-onboard", "maybe"}, {"-preempt", "kill"}, {"-max-seqs", "0"}, {"-max-batched-tokens", "-5"},
		{"-time-scale", "-1"}, {"-time-scale", "NaN"}, {"-load", "0"}, {"-load", "11"}, {"-load", "NaN"}, {"-limit", "-1"}, {"-onboard-timeout", "-1s"},
		{"-series-interval", "0s"}, {"-hot-hits", "0"}, {"-write-quota", "0"}, {"-disk-write-quota", "0"}, {"-offload-ahead", "0"}, {"-no-such-flag"}, {"extra"},
	} {
		var stderr bytes.Buffer
		err := run(context.Background(), args, &bytes.Buffer{}, &stderr, false)
		if err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	// Only -pinned-blocks 0 with GPU-only runs is fine.
	if _, err := parseFlags([]string{"-pinned-blocks", "0", "-configs", "gpu"}, &bytes.Buffer{}); err != nil {
		t.Errorf("GPU only without a pinned tier: %v", err)
	}
	if err := run(context.Background(), []string{"-h"}, &bytes.Buffer{}, &bytes.Buffer{}, false); !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v, want flag.ErrHelp", err)
	}
	if err := run(context.Background(), []string{"-trace", filepath.Join(t.TempDir(), "missing.jsonl")}, &bytes.Buffer{}, &bytes.Buffer{}, false); err == nil {
		t.Error("a missing trace: no error")
	}
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte(`{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}`+"\n{oops\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"-trace", bad}, &bytes.Buffer{}, &bytes.Buffer{}, false)
	var pe *trace.ParseError
	if !errors.As(err, &pe) || pe.Line != 2 {
		t.Errorf("a malformed line: %v, want a *trace.ParseError for line 2", err)
	}
}

func TestFormatting(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", -1234567: "-1,234,567"} {
		if got := commas(n); got != want {
			t.Errorf("commas(%d) = %q, want %q", n, got, want)
		}
	}
	for n, want := range map[int64]string{512: "512 B", 64 << 20: "64.0 MiB", 3 << 40: "3.0 TiB"} {
		if got := bytesIEC(n); got != want {
			t.Errorf("bytesIEC(%d) = %q, want %q", n, got, want)
		}
	}
	if got := fmt.Sprint(seconds(250), " ", seconds(12345)); got != "250 ms 12.35 s" {
		t.Errorf("seconds: %q", got)
	}
	// A rate below 10 keeps two figures: a trace of a few long prompts
	// decodes 0.42 tokens/s over its run, which "%.0f" printed as 0.
	for v, want := range map[float64]string{282.4: "282", 10: "10", 9.87: "9.9", 0.424: "0.42", 0: "0"} {
		if got := rate(v); got != want {
			t.Errorf("rate(%v) = %q, want %q", v, got, want)
		}
	}
}

// TestTraceBlockTokens: a trace whose hash ids stand for 128 tokens, read
// with -trace-block-tokens 128, replays exactly as the same prompts written
// with 512-token ids (each 512-token id split into four): the same hits on
// every tier. Without the flag the file is refused, line
// by line, instead of being read as 512-token ids.
func TestTraceBlockTokens(t *testing.T) {
	path, reqs := smallTrace(t)
	var b bytes.Buffer
	fine := make([]trace.Request, len(reqs))
	for i, r := range reqs {
		f := r
		f.HashIDs = nil
		for _, h := range r.HashIDs {
			f.HashIDs = append(f.HashIDs, 4*h, 4*h+1, 4*h+2, 4*h+3)
		}
		f.HashIDs = f.HashIDs[:(r.InputLength+127)/128]
		fine[i] = f
		line, err := json.Marshal(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	finePath := filepath.Join(t.TempDir(), "fine.jsonl")
	if err := os.WriteFile(finePath, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := parseFlags(append(smallArgs(path)[2:], "-trace-block-tokens", "128"), io.Discard); err == nil {
		t.Error("-trace-block-tokens without -trace accepted")
	}
	if err := run(context.Background(), append(smallArgs(finePath), "-configs", "gpu", "-plot", ""), io.Discard, io.Discard, false); err == nil {
		t.Error("a 128-token trace read as 512-token ids was accepted")
	}
	coarse, err := parseFlags(smallArgs(path), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags(append(smallArgs(finePath), "-trace-block-tokens", "128"), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, root := context.Background(), t.TempDir()
	a, err := replay(ctx, coarse, withDisk, reqs, root, nil)
	if err != nil {
		t.Fatal(err)
	}
	f, err := replay(ctx, o, withDisk, fine, root, nil)
	if err != nil {
		t.Fatal(err)
	}
	if a.res.GPUTokens != f.res.GPUTokens || a.res.PinnedTokens != f.res.PinnedTokens || a.res.DiskTokens != f.res.DiskTokens || a.res.Requests != f.res.Requests {
		t.Errorf("512-token ids: %+v\n128-token ids: %+v", a.res, f.res)
	}
	if a.res.PinnedTokens == 0 || a.res.DiskTokens == 0 {
		t.Errorf("the comparison is empty: %+v", a.res)
	}
	if of := optBound(o, f, fine); !(of.TokenHitRatio > 0) {
		t.Errorf("OPT over the 128-token ids: %+v", of)
	}
}

// TestPlotOneTTFT: a run whose requests all have the same TTFT (a trace of
// one request, or of two that arrive together) gives the CDF a single x
// value. Before, the plot's log axis padded it by ±1 s to a negative minimum
// and gonum panicked ("Values must be greater than 0 for a log scale"): the
// demo crashed with its default -plot on a one-line trace. So did a run
// with no TTFT at all.
func TestPlotOneTTFT(t *testing.T) {
	for _, ttfts := range [][]time.Duration{{21 * time.Millisecond}, {3 * time.Second, 3 * time.Second}, nil} {
		path := filepath.Join(t.TempDir(), "p.png")
		outs := []outcome{{tiers: gpuOnly, ttfts: ttfts}, {tiers: withPinned, ttfts: ttfts}}
		if err := writePlot(path, outs); err != nil {
			t.Fatalf("ttfts %v: %v", ttfts, err)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() < 1000 {
			t.Fatalf("ttfts %v: plot %v, %v", ttfts, fi, err)
		}
	}
}
