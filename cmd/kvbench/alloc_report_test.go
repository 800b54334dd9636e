package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"
)

// allocLines returns the alloc section's lines of the human output, header
// first, indexed by their label (the text before the first run of spaces).
func allocLines(t *testing.T, out string) (header string, lines map[string]string) {
	t.Helper()
	lines = map[string]string{}
	in := false
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "alloc: "):
			header, in = l, true
		case in && strings.HasPrefix(l, "  "):
			label, _, _ := strings.Cut(strings.TrimSpace(l), "  ")
			lines[label] = l
		case in:
			return header, lines
		}
	}
	if header == "" {
		t.Fatalf("no alloc section:\n%s", out)
	}
	return header, lines
}

// TestAllocReportSaysHowEachLineWasTimed renders an alloc result whose lines
// were timed three ways and checks that each line states its own: the
// 16-token direct lines over their rounds, the 512-token direct line over
// its (fewer) rounds, the actor lines as one timed run; and that the header
// claims no single figure for all of them.
func TestAllocReportSaysHowEachLineWasTimed(t *testing.T) {
	rep := &Report{Alloc: &AllocResult{
		SeqBlocks: 32, BlockTokens: 16, StemBlocks: 4, Stems: 16, PoolBlocks: 16384,
		DirectRounds: 31, DirectSeqsPerRound: 8000, LongDirectRounds: 15, LongDirectSeqsPerRound: 500, ActorWindowS: 3,
		HitFraction: 0.125, DirectBlocksPerS: 6e6, NsPerBlock1k: 140, NsPerBlock1m: 210, EvictionsPerBlock: 0.9,
		ActorBuilt: true, ActorBatch: 8, ActorClients: 8, ActorBlocksPerS: 5e6, ActorParallelBlocksPerS: 5e6, ActorOverDirectCost: 1.2,
		LongBlockTokens: 512, LongDirectBlocksPerS: 1.4e6, LongActorBlocksPerS: 1.2e6, LongActorOverDirectCost: 1.2,
	}}
	var out bytes.Buffer
	if err := writeHuman(&out, rep); err != nil {
		t.Fatal(err)
	}
	header, lines := allocLines(t, out.String())
	if strings.Contains(header, "median of") || strings.Contains(header, "rounds") {
		t.Errorf("header claims one timing for every line: %q", header)
	}
	for label, want := range map[string]string{
		"direct core, 16384-block pool":     "median of 31 rounds of 8000 sequences",
		"direct core, 1k-block pool":        "median of 31 rounds of 8000 sequences",
		"direct core, 1M-block pool":        "median of 31 rounds of 8000 sequences",
		"direct core, 512 tokens/block":     "median of 15 rounds of 500 sequences",
		"actor, 1 client, batch 8":          "one 3 s run",
		"actor, 8 clients, batch 8":         "one 3 s run",
		"actor, 1 client, 512 tokens/block": "one 3 s run",
	} {
		l, ok := lines[label]
		if !ok {
			t.Errorf("no line %q:\n%s", label, out.String())
			continue
		}
		if !strings.Contains(l, want) {
			t.Errorf("line %q does not say %q", l, want)
		}
		if strings.Contains(want, "median") && strings.Contains(l, "run)") || !strings.Contains(want, "median") && strings.Contains(l, "median") {
			t.Errorf("line %q mixes up how it was timed", l)
		}
	}
}

// TestAllocReportJSONTimings runs the alloc suite (-quick -json) and checks
// that the JSON says how each group of figures was timed, with the counts
// runAlloc and runLongAlloc use in quick mode, and no single "rounds".
func TestAllocReportJSONTimings(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-json", "-quick", "-suite", "alloc"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Alloc map[string]any `json:"alloc"`
	}
	if err := json.Unmarshal(out.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	if _, ok := doc.Alloc["rounds"]; ok {
		t.Errorf("alloc still has one rounds field for lines timed differently: %v", doc.Alloc)
	}
	want := map[string]float64{
		"direct_rounds": 3, "direct_seqs_per_round": 500,
		"long_direct_rounds": 3, "long_direct_seqs_per_round": 50,
	}
	if doc.Alloc["actor_built"] == true {
		want["actor_window_s"] = actorWindow(true).Seconds()
	}
	for k, v := range want {
		if doc.Alloc[k] != v {
			t.Errorf("alloc.%s = %v, want %v", k, doc.Alloc[k], v)
		}
	}
}

// TestAllocActorWindowIsRunActors checks that actorWindow, which the report
// prints as the length of each actor run, is how long runActor's runs take:
// two runs (one client, then actorClients) take at least two windows, and
// not much more.
func TestAllocActorWindowIsRunActors(t *testing.T) {
	start := time.Now()
	res, err := runActor(true /* quick */, metricsSink{}, blockTokens, true /* parallel */)
	if err != nil {
		t.Fatal(err)
	}
	if !res.built {
		t.Skip("actor path not built")
	}
	elapsed := time.Since(start)
	if lo, hi := 2*actorWindow(true), 2*actorWindow(true)+3*time.Second; elapsed < lo || elapsed > hi {
		t.Errorf("runActor's two quick runs took %v, want %v to %v: actorWindow no longer matches its dur", elapsed, lo, hi)
	}
}
