// Command demo replays an LLM request trace through a kvtier Manager and reports
// what each tier saves.
//
// With no flags it replays the embedded sample (the first 600 requests of the
// Mooncake conversation trace) through two configurations side by side: GPU only,
// and GPU plus a pinned host tier. Each request allocates its prompt (prefix hits
// come from the GPU or are copied up from pinned memory), decodes up to
// -max-output tokens in one batched append, and frees its blocks, which stay
// cached; evicted blocks go down to pinned memory. Block bytes are real (the
// default model layout is 64 bytes a token), and every copy is a real copy.
//
// Usage:
//
//	go run ./cmd/demo [-trace FILE] [-blocks 256,1024] [-pinned-blocks 4096] [-block-tokens 512] [-max-output 64]
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/policy"
	"github.com/kvtier/kvtier/trace"
)

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

type options struct {
	tracePath   string
	blocks      []int
	pinned      int
	pinPolicy   policy.Kind
	ingestion   kvtier.Ingestion
	blockTokens int
	vocab       int
	maxOutput   int
	skipBad     bool
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var o options
	var blocks, pol, ingest string
	fs.StringVar(&o.tracePath, "trace", "", "Mooncake-format JSONL trace (default: the embedded 600-request sample)")
	fs.StringVar(&blocks, "blocks", "256,1024", "comma-separated GPU pool sizes in blocks; each runs GPU only and GPU+pinned")
	fs.IntVar(&o.pinned, "pinned-blocks", 4096, "pinned host tier capacity in blocks (0: GPU-only runs only)")
	fs.StringVar(&pol, "pinned-policy", "lru", "pinned tier eviction policy: lru, fifo, s3fifo")
	fs.StringVar(&ingest, "ingestion", "evict", "when GPU blocks go down to pinned memory: evict, all, hot")
	fs.IntVar(&o.blockTokens, "block-tokens", trace.BlockTokens, "tokens per block")
	fs.IntVar(&o.vocab, "vocab", 128256, "vocabulary size for the synthetic token ids")
	fs.IntVar(&o.maxOutput, "max-output", 64, "decode at most this many output tokens per request (0: none)")
	fs.BoolVar(&o.skipBad, "skip-bad-lines", false, "skip malformed trace lines instead of stopping")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	for _, f := range strings.Split(blocks, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			return o, fmt.Errorf("-blocks: %q is not a positive block count", f)
		}
		o.blocks = append(o.blocks, n)
	}
	var err error
	if o.pinPolicy, err = policy.ParseKind(pol); err != nil {
		return o, fmt.Errorf("-pinned-policy: %w", err)
	}
	switch ingest {
	case "evict":
		o.ingestion = kvtier.IngestEvict
	case "all":
		o.ingestion = kvtier.IngestAll
	case "hot":
		o.ingestion = kvtier.IngestHot
	default:
		return o, fmt.Errorf("-ingestion: %q is not evict, all or hot", ingest)
	}
	if o.pinned < 0 {
		return o, errors.New("-pinned-blocks must be >= 0")
	}
	if o.blockTokens <= 0 || o.vocab <= 0 || o.maxOutput < 0 {
		return o, errors.New("-block-tokens and -vocab must be > 0, -max-output >= 0")
	}
	return o, nil
}

// result is one replay's outcome.
type result struct {
	name       string
	requests   int
	rejected   int // prompts larger than the whole GPU pool
	promptToks int
	gpuToks    int // prompt tokens found on the GPU
	pinnedToks int // prompt tokens copied up from pinned memory
	elapsed    time.Duration
	stats      kvtier.Stats
}

func (r result) savedToks() int { return r.gpuToks + r.pinnedToks }

func run(args []string, out io.Writer) error {
	o, err := parseFlags(args)
	if err != nil {
		return err
	}
	var reqs []trace.Request
	name := trace.SampleName
	if o.tracePath == "" {
		reqs = trace.Sample()
	} else {
		mode := trace.Stop
		if o.skipBad {
			mode = trace.Skip
		}
		var rep trace.Report
		reqs, rep, err = trace.ReadFile(o.tracePath, trace.Options{OnError: mode})
		if err != nil {
			return err
		}
		name = fmt.Sprintf("%s (%d requests, %d malformed lines skipped)", o.tracePath, len(reqs), rep.Skipped)
	}
	prompts := make([][]int64, len(reqs))
	for i, r := range reqs {
		prompts[i] = trace.Tokens(r, o.vocab)
	}
	fmt.Fprintf(out, "kvtier demo: %s, %d-token blocks, pinned tier %d blocks (%s, ingestion %s)\n\n",
		name, o.blockTokens, o.pinned, o.pinPolicy, o.ingestion)
	fmt.Fprintf(out, "%-22s %8s %8s %9s %9s %9s %11s %9s %9s %8s %9s\n",
		"config", "requests", "rejected", "gpu hit", "pinned", "total", "saved tok", "evicted", "offload", "onboard", "denied")
	for _, n := range o.blocks {
		pins := []int{0}
		if o.pinned > 0 {
			pins = append(pins, o.pinned)
		}
		for _, p := range pins {
			r, err := replay(reqs, prompts, n, p, o)
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%-22s %8d %8d %8.2f%% %8.2f%% %8.2f%% %11d %9d %9d %8d %9d\n",
				r.name, r.requests, r.rejected,
				pct(r.gpuToks, r.promptToks), pct(r.pinnedToks, r.promptToks), pct(r.savedToks(), r.promptToks), r.savedToks(),
				r.stats.GPU.Evictions, r.stats.GPU.Offloaded, r.stats.GPU.Onboarded, r.stats.GPU.Denied+r.stats.Pinned.Denied)
		}
	}
	fmt.Fprintln(out, "\ngpu hit / pinned / total: share of prompt tokens served from the GPU, copied up from pinned memory, and both;")
	fmt.Fprintln(out, "saved tok: prompt tokens not recomputed. evicted/offload/onboard/denied: GPU blocks evicted, written down, copied up, writes denied.")
	return nil
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// replay runs every request, one at a time, through a fresh Manager with gpuBlocks
// GPU blocks and pinnedBlocks of pinned memory (0: none). A Flush after each
// request makes every run deterministic.
func replay(reqs []trace.Request, prompts [][]int64, gpuBlocks, pinnedBlocks int, o options) (result, error) {
	ctx := context.Background()
	cfg := kvtier.Config{GPUBlocks: gpuBlocks, BlockTokens: o.blockTokens, VocabSize: o.vocab,
		PinnedPolicy: o.pinPolicy, Ingestion: o.ingestion, ReadDeadlineBase: -1}
	res := result{name: fmt.Sprintf("gpu %d", gpuBlocks)}
	if pinnedBlocks > 0 {
		m0, err := kvtier.New(kvtier.Config{GPUBlocks: 1, BlockTokens: o.blockTokens})
		if err != nil {
			return res, err
		}
		cfg.PinnedBytes = int64(pinnedBlocks) * int64(m0.Layout().BlockBytes())
		m0.Close(ctx)
		res.name += fmt.Sprintf(" + pinned %d", pinnedBlocks)
	}
	m, err := kvtier.New(cfg)
	if err != nil {
		return res, err
	}
	defer m.Close(ctx)
	start := time.Now()
	for i, r := range reqs {
		toks := prompts[i]
		seq := uint64(i)
		res.requests++
		res.promptToks += len(toks)
		a, err := m.Allocate(ctx, kvtier.AllocRequest{Seq: seq, Tokens: toks})
		if errors.Is(err, kvtier.ErrNoSpace) {
			res.rejected++
			continue
		}
		if err != nil {
			return res, fmt.Errorf("request %d: %w", i, err)
		}
		<-a.Ready.Done()
		outc := a.Ready.Outcome()
		res.gpuToks += a.GPUTokens
		res.pinnedToks += outc.ValidTokens - a.GPUTokens
		if n := min(r.OutputLength, o.maxOutput); n > 0 {
			dec := make([]int64, n)
			for t := range dec {
				dec[t] = int64((i*7919 + t) % o.vocab)
			}
			if err := m.Append(ctx, seq, dec); err != nil && !errors.Is(err, kvtier.ErrNoSpace) {
				return res, fmt.Errorf("request %d decode: %w", i, err)
			}
		}
		if err := m.Free(ctx, seq); err != nil {
			return res, err
		}
		if err := m.Flush(ctx); err != nil {
			return res, err
		}
	}
	res.elapsed = time.Since(start)
	res.stats, err = m.Stats(ctx)
	return res, err
}
