// Command demo replays an LLM request trace through kvtier's block pool and reports
// what prefix caching saves.
//
// With no flags it replays the embedded sample (the first 600 requests of the
// Mooncake conversation trace) at several GPU pool sizes side by side. Each request
// allocates its prompt (prefix hits are served from cached blocks), decodes its
// output tokens one at a time through MayAppend, and frees its blocks, which stay
// cached until reused.
//
// Usage:
//
//	go run ./cmd/demo [-trace FILE] [-blocks 1024,4096,16384] [-block-tokens 512] [-max-output 64]
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/kvtier/kvtier/blockpool"
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
	blockTokens int
	vocab       int
	maxOutput   int
	skipBad     bool
}

func parseFlags(args []string) (options, error) {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var o options
	var blocks string
	fs.StringVar(&o.tracePath, "trace", "", "Mooncake-format JSONL trace (default: the embedded 600-request sample)")
	fs.StringVar(&blocks, "blocks", "256,1024,4096", "comma-separated GPU pool sizes in blocks, one run each")
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
	if o.blockTokens <= 0 || o.vocab <= 0 || o.maxOutput < 0 {
		return o, errors.New("-block-tokens and -vocab must be > 0, -max-output >= 0")
	}
	return o, nil
}

// result is one replay's outcome.
type result struct {
	blocks      int
	requests    int
	rejected    int // prompts larger than the whole pool
	promptToks  int
	cachedToks  int
	hitBlocks   int
	promptBlks  int
	allocBlocks int
	elapsed     time.Duration
	final       blockpool.Stats
}

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
	fmt.Fprintf(out, "kvtier demo: %s, %d-token blocks\n\n", name, o.blockTokens)
	fmt.Fprintf(out, "%8s %9s %9s %10s %12s %10s %12s %9s %8s\n",
		"blocks", "requests", "rejected", "hit(blk)", "hit(tokens)", "saved tok", "blocks/s", "evicted", "cached")
	for _, n := range o.blocks {
		r, err := replay(reqs, prompts, n, o)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%8d %9d %9d %9.2f%% %11.2f%% %10d %12.0f %9d %8d\n",
			r.blocks, r.requests, r.rejected,
			pct(r.hitBlocks, r.promptBlks), pct(r.cachedToks, r.promptToks), r.cachedToks,
			float64(r.allocBlocks)/r.elapsed.Seconds(), r.final.Evictions, r.final.Cached)
	}
	fmt.Fprintln(out, "\nhit(blk): leading prompt blocks found cached / prompt blocks; hit(tokens): prompt tokens not recomputed.")
	fmt.Fprintln(out, "blocks/s: blocks allocated (prompt and decode) per second of replay on this machine.")
	return nil
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

// replay runs every request through a fresh pool of n blocks, one at a time.
func replay(reqs []trace.Request, prompts [][]int64, n int, o options) (result, error) {
	p, err := blockpool.New(blockpool.Config{NumBlocks: n, BlockSize: o.blockTokens, VocabSize: o.vocab})
	if err != nil {
		return result{}, err
	}
	res := result{blocks: n}
	start := time.Now()
	for i, r := range reqs {
		toks := prompts[i]
		id := blockpool.SeqID(i)
		res.requests++
		res.promptToks += len(toks)
		res.promptBlks += (len(toks) + o.blockTokens - 1) / o.blockTokens
		a, err := p.Allocate(id, toks, "")
		if errors.Is(err, blockpool.ErrNoSpace) {
			res.rejected++
			continue
		}
		if err != nil {
			return res, fmt.Errorf("request %d: %w", i, err)
		}
		res.cachedToks += a.CachedTokens
		res.hitBlocks += a.HitBlocks
		res.allocBlocks += len(a.Blocks)
		for t := range min(r.OutputLength, o.maxOutput) {
			if ok, _ := p.CanAppend(id); !ok {
				break
			}
			if err := p.MayAppend(id, int64((i*7919+t)%o.vocab)); err != nil {
				return res, fmt.Errorf("request %d decode: %w", i, err)
			}
		}
		if err := p.Deallocate(id); err != nil {
			return res, err
		}
		p.DrainEvicted(nil)
	}
	res.elapsed = time.Since(start)
	res.final = p.Stats()
	if err := p.CheckInvariants(); err != nil {
		return res, fmt.Errorf("pool invariants after replay: %w", err)
	}
	return res, nil
}
