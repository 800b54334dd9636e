package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/trace"
)

func TestDemoDefaultRun(t *testing.T) {
	var out bytes.Buffer
	if err := run([]string{"-blocks", "128"}, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "gpu 128 + pinned 4096") || strings.Count(out.String(), "%") < 6 {
		t.Fatalf("unexpected output:\n%s", out.String())
	}
}

// TestTiersNeverLoseHits: on the sample, a pinned tier never saves fewer tokens
// than the GPU alone, a bigger GPU never fewer than a smaller one, and the runs
// are deterministic.
func TestTiersNeverLoseHits(t *testing.T) {
	reqs := trace.Sample()
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	prompts := make([][]int64, len(reqs))
	for i, r := range reqs {
		prompts[i] = trace.Tokens(r, o.vocab)
	}
	saved := func(gpu, pinned int) int {
		r, err := replay(reqs, prompts, gpu, pinned, o)
		if err != nil {
			t.Fatal(err)
		}
		return r.savedToks()
	}
	small, big, tiered := saved(256, 0), saved(1024, 0), saved(256, 4096)
	if big < small || tiered < small || tiered == 0 {
		t.Fatalf("saved tokens: gpu 64 %d, gpu 512 %d, gpu 64 + pinned 1024 %d", small, big, tiered)
	}
	if again := saved(256, 4096); again != tiered {
		t.Fatalf("not deterministic: %d then %d", tiered, again)
	}
	if tiered <= small {
		t.Fatalf("the pinned tier saved nothing: %d vs %d", tiered, small)
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-blocks", "0"}, {"-blocks", "x"}, {"-block-tokens", "0"}, {"-pinned-policy", "mru"}, {"-ingestion", "some"}} {
		if err := run(args, &bytes.Buffer{}); err == nil {
			t.Fatalf("%v: no error", args)
		}
	}
}
