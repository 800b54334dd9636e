package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/scheduler"
)

// tableRow returns the cells of the table row labelled label in s, or nil
// (labels right-aligned, as the multi-node table's are, match too).
func tableRow(s, label string) []string {
	for _, line := range strings.Split(s, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimLeft(line, " "), label); ok && strings.HasPrefix(rest, "  ") {
			return strings.Fields(rest)
		}
	}
	return nil
}

// TestNothingServed: when every request is rejected (none fits in a
// one-block GPU), no request has a time to first token, a hit ratio or a
// throughput: the table says "-" for them. It printed "0 ms" for every TTFT
// percentile and "0.00%" for the hit ratio and OPT, figures of requests
// that never ran.
func TestNothingServed(t *testing.T) {
	_, table := runJSON(t, []string{"-gpu-blocks", "1", "-limit", "20", "-configs", "gpu,pinned"})
	for _, label := range []string{"TTFT p50", "TTFT p90", "TTFT p99", "hit ratio", "OPT at total capacity", "hit ratio / OPT", "throughput (output tok/s)"} {
		cells := tableRow(table, label)
		if len(cells) != 2 || cells[0] != "-" || cells[1] != "-" {
			t.Errorf("row %q: %q, want \"-\" in both columns: no request was served\n%s", label, cells, table)
		}
	}
	if cells := tableRow(table, "requests served"); len(cells) != 2 || cells[0] != "0" {
		t.Errorf("requests served: %q, want 0", cells)
	}
}

// TestFleetNothingServed: the multi-node table says "-" for the TTFT
// percentiles and the hit ratio when every request is rejected, as the
// tier comparison's does ("0 ms" and "0.0%" before).
func TestFleetNothingServed(t *testing.T) {
	var out, stderr bytes.Buffer
	args := []string{"-gpu-blocks", "1", "-limit", "20", "-nodes", "2", "-route", "rr", "-plot", ""}
	if err := run(context.Background(), args, &out, &stderr, false); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	for _, label := range []string{"TTFT p50", "TTFT p90", "TTFT p99", "hit ratio"} {
		cells := tableRow(out.String(), label)
		if len(cells) != 1 || cells[0] != "-" {
			t.Errorf("row %q: %q, want \"-\": no request was served\n%s", label, cells, out.String())
		}
	}
}

// TestHeaderCounts: the headers say "1 request" and "1 replica", not "1
// requests" and "1 replicas".
func TestHeaderCounts(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-limit", "1", "-configs", "gpu"}, ": 1 request, 512-token blocks"},
		{[]string{"-limit", "1", "-nodes", "1", "-route", "rr"}, "kvtier demo, 1 replica: "},
		{[]string{"-limit", "1", "-nodes", "1", "-route", "rr"}, ": 1 request, 512-token blocks"},
	} {
		var out, stderr bytes.Buffer
		if err := run(context.Background(), append(tc.args, "-plot", ""), &out, &stderr, false); err != nil {
			t.Fatalf("%v\n%s", err, stderr.String())
		}
		if first := strings.SplitN(out.String(), "\n", 2)[0]; !strings.Contains(first, tc.want) {
			t.Errorf("%v: header %q lacks %q", tc.args, first, tc.want)
		}
	}
}

// TestLegendExplainsThroughput: every column's throughput row reads the
// same on the default run, as the arrivals are an open loop; the legend
// says so and what the run length is, which it did not (a reader took the
// equal throughputs for the tiers buying nothing).
func TestLegendExplainsThroughput(t *testing.T) {
	_, table := runJSON(t, []string{"-limit", "20", "-configs", "gpu"})
	for _, want := range []string{"throughput: output tokens over the run length", "run length: the modelled time from the first arrival to the end of the last step",
		"open loop"} {
		if !strings.Contains(table, want) {
			t.Errorf("legend lacks %q:\n%s", want, table)
		}
	}
}

// TestPlotHitAxisIsAShare: the hit-ratio panel plots a share of prompt
// tokens (0 to 1) and its axis says so; it read "prompt tokens served from
// a cache tier", a count, over ticks of 0.08 and 0.16.
func TestPlotHitAxisIsAShare(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.svg")
	series := []scheduler.SeriesPoint{{AdmittedTokens: 100, HitTokens: 10}, {Start: time.Second, AdmittedTokens: 100, HitTokens: 30}}
	out := outcome{tiers: gpuOnly, ttfts: []time.Duration{time.Second}, res: scheduler.Result{Series: series, SeriesInterval: time.Second}}
	if err := writePlot(path, []outcome{out}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(b, []byte("share of prompt tokens hit")) {
		t.Errorf("the hit-ratio axis does not say it is a share of prompt tokens")
	}
}

// TestProgressNamesTheRunClock: the progress bar shows the run's logical
// clock, arrivals stretched by the time scale, and names it so; it said
// "trace time", which on the default run reached 760 s of a 201 s trace.
func TestProgressNamesTheRunClock(t *testing.T) {
	var b bytes.Buffer
	p := &progressBar{w: &b, label: "gpu"}
	p.update(scheduler.Progress{Finished: 1, Total: 1, Now: 760 * time.Second})
	if s := b.String(); !strings.Contains(s, "modelled time   760.0 s") || strings.Contains(s, "trace time") {
		t.Errorf("progress line %q: want the run's clock called modelled time", s)
	}
}

// TestFleetTokensWithCommas: the multi-node table writes token counts as
// the tier table does, with thousands separators ("7637281" before).
func TestFleetTokensWithCommas(t *testing.T) {
	var out, stderr bytes.Buffer
	args := []string{"-limit", "20", "-nodes", "2", "-route", "rr", "-plot", ""}
	if err := run(context.Background(), args, &out, &stderr, false); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	cells := tableRow(out.String(), "prefill tokens computed")
	if len(cells) != 1 || !strings.Contains(cells[0], ",") {
		t.Errorf("prefill tokens computed: %q, want thousands separators\n%s", cells, out.String())
	}
}
