package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/trace"
)

func TestDemoDefaultRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(nil, &out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "600") || strings.Count(out.String(), "%") < 6 {
		t.Fatalf("unexpected output:\n%s", out.String())
	}
}

// TestMoreBlocksNeverFewerHits: on the sample, a bigger pool never hits less.
func TestMoreBlocksNeverFewerHits(t *testing.T) {
	reqs := trace.Sample()
	o, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	prompts := make([][]int64, len(reqs))
	for i, r := range reqs {
		prompts[i] = trace.Tokens(r, o.vocab)
	}
	prev := -1
	for _, n := range []int{64, 512, 4096, 1 << 15} {
		r, err := replay(reqs, prompts, n, o)
		if err != nil {
			t.Fatal(err)
		}
		if r.cachedToks < prev {
			t.Fatalf("%d blocks: %d cached tokens, fewer than %d with a smaller pool", n, r.cachedToks, prev)
		}
		prev = r.cachedToks
	}
	if prev == 0 {
		t.Fatal("no hits at all on the sample")
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-blocks", "0"}, {"-blocks", "x"}, {"-block-tokens", "0"}} {
		if err := run(args, &bytes.Buffer{}); err == nil {
			t.Fatalf("%v: no error", args)
		}
	}
}
