package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"
)

// TestBlockDefaultsInTokens: the capacities, write quotas and offload window
// not given on the command line hold the same tokens at any -block-tokens;
// those given keep their value. Before, -block-tokens 16 left the GPU 1,024
// blocks, 16,384 tokens where the default has 524,288, and the write quota
// 256 blocks.
func TestBlockDefaultsInTokens(t *testing.T) {
	for _, c := range []struct {
		args []string
		want [6]int // gpu, pinned, disk, write quota, disk quota, offload ahead
	}{
		{nil, [6]int{1024, 4096, 16384, 256, 4096, 64}},
		{[]string{"-block-tokens", "16"}, [6]int{32768, 131072, 524288, 8192, 131072, 2048}},
		{[]string{"-block-tokens", "1024"}, [6]int{512, 2048, 8192, 128, 2048, 32}},
		{[]string{"-block-tokens", "1000"}, [6]int{524, 2097, 8388, 131, 2097, 32}}, // rounded down
		{[]string{"-block-tokens", "16", "-gpu-blocks", "100", "-write-quota", "7"}, [6]int{100, 131072, 524288, 7, 131072, 2048}},
		{[]string{"-block-tokens", "1048576"}, [6]int{1, 2, 8, 1, 2, 1}}, // at least one
	} {
		o, err := parseFlags(c.args, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		got := [6]int{o.gpuBlocks, o.pinnedBlocks, o.diskBlocks, o.writeQuota, o.diskQuota, o.offloadAhead}
		if got != c.want {
			t.Errorf("%q: gpu, pinned, disk, write quota, disk quota, offload ahead = %v, want %v", c.args, got, c.want)
		}
	}
	o, err := parseFlags([]string{"-block-tokens", "16"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	line := capacityLine(o)
	for _, want := range []string{"GPU 32,768 blocks (524,288 tokens)", "pinned 131,072 blocks (2,097,152 tokens)",
		"disk 524,288 blocks (8,388,608 tokens)", "GPU -> pinned 8,192 blocks (131,072 tokens)"} {
		if !strings.Contains(line, want) {
			t.Errorf("capacity line %q lacks %q", line, want)
		}
	}
}

// TestCapacityHeader: the header gives every capacity in blocks and tokens,
// in the tier comparison and the multi-node mode.
func TestCapacityHeader(t *testing.T) {
	path, _ := smallTrace(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{append(smallArgs(path), "-configs", "gpu"), "capacity: GPU 64 blocks (8,192 tokens), pinned 160 blocks (20,480 tokens), disk 1,024 blocks (131,072 tokens)"},
		{[]string{"-trace", path, "-block-tokens", "128", "-gpu-blocks", "64", "-pinned-blocks", "160", "-time-scale", "1", "-nodes", "2", "-route", "rr"}, "each replica GPU 64 blocks (8,192 tokens) + pinned 160 blocks (20,480 tokens)"},
	} {
		var out, stderr bytes.Buffer
		if err := run(context.Background(), append(c.args, "-plot", ""), &out, &stderr, false); err != nil {
			t.Fatalf("%q: %v\n%s", c.args, err, stderr.String())
		}
		head := strings.SplitN(out.String(), "\n\n", 2)[0]
		// -block-tokens 128 over a trace of 512-token ids: both sizes named.
		for _, want := range []string{c.want, "128-token blocks (the trace's hash ids: 512 tokens each)"} {
			if !strings.Contains(head, want) {
				t.Errorf("%q: header\n%s\nlacks %q", c.args, head, want)
			}
		}
	}
}

// TestBlockSizes: the header names the trace's id size only where it
// differs from the cache's block size.
func TestBlockSizes(t *testing.T) {
	for _, c := range []struct {
		o    options
		want string
	}{
		{options{blockTokens: 512, traceBlockTokens: 512}, "512-token blocks"},
		{options{blockTokens: 512, traceBlockTokens: 16}, "512-token blocks (the trace's hash ids: 16 tokens each)"},
	} {
		if got := blockSizes(c.o); got != c.want {
			t.Errorf("blockSizes(%d, %d) = %q, want %q", c.o.blockTokens, c.o.traceBlockTokens, got, c.want)
		}
	}
}

// TestBlocksAndTokensSingular: a count of one reads "1 block", not "1
// blocks" (the header of a run with -write-quota 1; review of 2026-11-27).
func TestBlocksAndTokensSingular(t *testing.T) {
	o := options{blockTokens: 1}
	for n, want := range map[int]string{0: "0 blocks (0 tokens)", 1: "1 block (1 token)", 2: "2 blocks (2 tokens)"} {
		if got := blocksAndTokens(n, o); got != want {
			t.Errorf("blocksAndTokens(%d) = %q, want %q", n, got, want)
		}
	}
}
