// Command demo replays an LLM request trace through kvtier with continuous
// batching and shows what each memory tier buys: how many prefill tokens it
// saves and what that does to time to first token.
//
// With no flags it replays the embedded sample (the first 600 requests of the
// Mooncake conversation trace, 512-token blocks, arrivals stretched until
// the trace's compute fills 0.8 of the modelled GPU's time: see -load and
// load.go) through three configurations
// side by side: GPU only; GPU + pinned host memory; GPU + pinned + disk (in a
// temporary directory removed at exit, or at the next run if the demo was
// killed: see diskdir.go). Each runs the scheduler package's
// continuous batching over a real kvtier Manager (through schedcache): blocks
// are allocated, appended, freed, evicted, written down and copied up for
// real, with gpu.TinySpec's 64 bytes a token so the run fits in memory, while
// step and transfer times come from the scheduler's default cost model (an
// H100 with Llama-3-8B, 128 KiB a token) on a logical clock: the same flags
// give the same numbers, and an hour of trace replays in minutes.
//
// It prints one column per configuration (requests, prompt tokens, tokens
// served from each tier, hit ratio, prefill tokens computed, the prefill
// compute each tier's hits saved, GPU busy time, TTFT p50/p90/p99,
// throughput, traffic per link at Llama-3-8B's size, preemptions, denied and
// timed-out transfers), writes a plot of the TTFT distribution and the hit
// ratio over time (-plot, PNG or SVG), and with -json the numbers as JSON.
//
// Usage:
//
//	go run ./cmd/demo
//	go run ./cmd/demo -trace ../shared/traces/conversation_trace.jsonl
//	go run ./cmd/demo -gpu-blocks 512 -pinned-policy arc -onboard timeout -json -
//
// Run with -h for every flag.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/internal/promserve"
	"github.com/kvtier/kvtier/scheduler"
	"github.com/kvtier/kvtier/trace"
)

func main() {
	// SIGTERM too: a cancelled run still removes its disk directory.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr, isTerminal(os.Stderr))
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo:", err)
		os.Exit(1)
	}
}

// run is the command: args are the flags, the table goes to stdout (to stderr
// with -json -), the progress bar to stderr when tty is set or with -progress.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, tty bool) (err error) {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	reqs, name, err := loadTrace(o)
	if err != nil {
		return err
	}
	if len(reqs) == 0 {
		return errors.New("the trace has no requests")
	}
	// Requests that can never fit in the GPU are rejected on arrival: the
	// offered work is that of the others, which the GPU serves.
	served, tooLong := servable(reqs, schedulerConfig(o, nil))
	work := offeredWork(served, scheduler.DefaultCostModel(), o.maxOutput) // the scheduler's cost model
	autoScale := o.timeScale == 0
	if autoScale {
		o.timeScale = timeScaleFor(work, o.load)
	}
	table := stdout
	if o.jsonPath == "-" {
		table = stderr
	}
	if o.metricsAddr != "" {
		if o.metrics, err = promserve.Start(o.metricsAddr); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "metrics: http://%s/metrics\n", o.metrics.Addr)
		defer func() {
			if err == nil && ctx.Err() == nil {
				err = o.metrics.Hold(ctx, stderr)
			} else {
				_ = o.metrics.Close()
			}
		}()
	}
	if o.nodes > 0 {
		if autoScale {
			o.timeScale /= float64(o.nodes) // N replicas: N times the traffic
		}
		return runFleet(ctx, o, reqs, name, table, work, autoScale, tooLong)
	}
	diskRoot := ""
	if slices.Contains(o.configs, withDisk) {
		root, err := openDiskRoot(o, stderr)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, root.Close()) }()
		diskRoot = root.dir
	}

	fmt.Fprintf(table, "kvtier demo: %s: %s, %s\n", name, count(len(reqs), "request"), blockSizes(o))
	fmt.Fprintln(table, capacityLine(o))
	fmt.Fprintln(table, work.describe(o.timeScale, o.load, autoScale))
	if tooLong > 0 {
		fmt.Fprintln(table, rejectedNote(tooLong, o))
	}
	classes := "request classes at finish"
	if o.noClass {
		classes = "no request classes"
	}
	fmt.Fprintf(table, "policies: pinned %s, disk %s (%s); ingestion %s, to disk %s; onboard %s, preempt %s; max %d seqs, %d tokens a step\n",
		o.pinnedPolicy, o.diskPolicy, classes, o.ingestion, o.diskIngestion, o.onboard, o.preempt, o.maxSeqs, o.maxBatched)
	fmt.Fprintf(table, "times: logical clock, H100-SXM + Llama-3-8B cost model (128 KiB KV a token); blocks hold %d real bytes (gpu.TinySpec)\n\n",
		blockBytes(gpu.TinySpec, o.blockTokens))

	outs := make([]outcome, 0, len(o.configs))
	for _, t := range o.configs {
		var onProgress func(scheduler.Progress)
		var bar *progressBar
		if tty || o.progress {
			bar = &progressBar{w: stderr, label: t.String()}
			onProgress = bar.update
		}
		out, err := replay(ctx, o, t, reqs, diskRoot, onProgress)
		if bar != nil {
			bar.finish()
		}
		if err != nil {
			return err
		}
		out.opt = optBound(o, out, reqs)
		outs = append(outs, out)
	}

	rep := newJSONReport(o, name, len(reqs), work, outs)
	printTable(table, rep)
	fmt.Fprintln(table, "\nserved from: share of the prompt tokens found on each tier at each request's first admission; hit ratio: their sum;")
	fmt.Fprintln(table, "readmitted tokens: what requests preempted and admitted again presented (prompt and output so far), and what of it they found cached (mostly their own KV): not in the rows above;")
	fmt.Fprintln(table, "prefill tokens computed: what prefill steps computed, recomputation after a preemption included; a request preempted during its prefill counts the chunks it ran;")
	fmt.Fprintf(table, "prefill compute saved: the cost model's compute for the prompt tokens each tier served at first admissions, as a share of the %.1f s a run with no cache computes;\n", rep.OfferedPrefillS)
	fmt.Fprintln(table, "GPU busy: modelled time in steps (a decode step costs at least one read of the weights, however small its batch).")
	fmt.Fprintln(table, "run length: the modelled time from the first arrival to the end of the last step; throughput: output tokens over the run length. Arrivals come at the rate above whatever the GPU does (an open loop), so a configuration that keeps up with them has the trace's output rate: the columns differ in TTFT and GPU busy, not throughput.")
	fmt.Fprintln(table, "OPT: Belady's MIN with every tier's blocks as one cache (cachesim.OPT, over the ids by prefix as chained hashes tell blocks apart), the most block hits any policy can get, shown as a share of prompt tokens; hit ratio / OPT compares the run with it (OPT maximises blocks, not tokens, so the ratio can pass 1 by a little). "+
		"OPT serves the requests one after another: a request that arrives while an earlier request still computes the same prefix cannot hit it (commit before cache), so a trace of identical prompts arriving together stays under OPT whatever the policy.")
	fmt.Fprintf(table, "GPU -> pinned, ... (Llama-3-8B bytes): blocks moved over each link x %s (a %d-token block of Llama-3-8B); the demo's own blocks hold %s each.\n",
		bytesIEC(rep.ModelBlockBytes), o.blockTokens, bytesIEC(int64(rep.BlockBytes)))
	fmt.Fprintln(table, "denied writes: blocks not written down, over a tier's in-flight quota or short of room (TierStats.Denied, all tiers); timed-out loads: sched, loads the scheduler gave up on (-onboard timeout), manager, blocks of loads past the Manager's -read-deadline (TierStats.Timeouts, all tiers);")
	fmt.Fprintln(table, "replay wall time: real time each replay took on this machine (the other times are the logical clock's).")
	if rep.rejected() {
		fmt.Fprintf(table, "rejected requests: their prompt and output need more KV than the GPU holds (%s tokens), so they can never run; they end unserved, as vLLM rejects a request past its max_model_len. They are in no other row: prompt tokens, hit ratio, OPT and prefill compute saved are over the served requests.\n",
			commas(int64(o.gpuBlocks*o.blockTokens)))
	}
	if o.preempt == scheduler.Swap {
		fmt.Fprintln(table, "preempt swap: preempted sequences' full blocks go to pinned memory; with no pinned tier (the gpu column) they are recomputed (swap fallbacks).")
	}
	if o.jsonPath != "" {
		if err := writeJSONTo(o.jsonPath, stdout, rep); err != nil {
			return err
		}
	}
	if o.plotPath != "" {
		if err := writePlot(o.plotPath, outs); err != nil {
			return err
		}
		fmt.Fprintf(table, "plot: %s\n", o.plotPath)
	}
	return nil
}

// blocksAndTokens reads "n blocks (n x -block-tokens tokens)", singular
// where a count is one.
func blocksAndTokens(n int, o options) string {
	t := int64(n) * int64(o.blockTokens)
	return fmt.Sprintf("%s %s (%s %s)", commas(int64(n)), plural(int64(n), "block"), commas(t), plural(t, "token"))
}

// count reads "n word", with an s unless n is one.
func count(n int, word string) string {
	return fmt.Sprintf("%d %s", n, plural(int64(n), word))
}

// firstRequests names the first n requests of a trace cut by -limit.
func firstRequests(n int) string {
	if n == 1 {
		return "first request"
	}
	return fmt.Sprintf("first %d requests", n)
}

// plural returns word, with an s unless n is one.
func plural(n int64, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// capacityLine gives, for the header, every capacity and quota counted in
// blocks in tokens too: their defaults hold the same tokens at any
// -block-tokens (scaleBlockDefaults).
func capacityLine(o options) string {
	return fmt.Sprintf("capacity: GPU %s, pinned %s, disk %s\n"+
		"write quotas: GPU -> pinned %s, pinned -> disk %s; offload ahead %s",
		blocksAndTokens(o.gpuBlocks, o), blocksAndTokens(o.pinnedBlocks, o), blocksAndTokens(o.diskBlocks, o),
		blocksAndTokens(o.writeQuota, o), blocksAndTokens(o.diskQuota, o), blocksAndTokens(o.offloadAhead, o))
}

// rejectedNote says, for the header, that n requests can never fit in the
// GPU and what becomes of them.
func rejectedNote(n int, o options) string {
	return fmt.Sprintf("%d %s can never fit in the GPU (prompt + output past its %s tokens): rejected on arrival, not in the offered work above nor in any served figure",
		n, plural(int64(n), "request"), commas(int64(o.gpuBlocks*o.blockTokens)))
}

// loadTrace returns the requests to replay and a name for them.
func loadTrace(o options) ([]trace.Request, string, error) {
	var reqs []trace.Request
	name := trace.SampleName
	if o.tracePath == "" {
		reqs = trace.Sample()
		if o.limit > 0 && o.limit < len(reqs) {
			name = limitedSampleName(o.limit, len(reqs))
			reqs = reqs[:o.limit]
		}
	} else {
		mode := trace.Stop
		if o.skipBad {
			mode = trace.Skip
		}
		var rep trace.Report
		var err error
		reqs, rep, err = trace.ReadFile(o.tracePath, trace.Options{OnError: mode, Limit: o.limit, BlockTokens: o.traceBlockTokens, TimeUnit: o.traceTimeUnit})
		if err != nil {
			return nil, "", err
		}
		if len(reqs) == 0 && len(rep.Errors) > 0 {
			return nil, "", fmt.Errorf("the trace has no requests: all %d lines of %s are malformed, skipped by -skip-bad-lines; the first: %w",
				rep.Skipped, o.tracePath, &rep.Errors[0])
		}
		name = o.tracePath
		if o.limit > 0 && len(reqs) == o.limit {
			name += ", " + firstRequests(o.limit)
		}
		if rep.Skipped > 0 {
			// The first line's error says why, and often what to do
			// (a -trace-block-tokens that reads the trace's ids).
			name += fmt.Sprintf(" (%d of %d lines malformed, skipped; the first: %v)", rep.Skipped, rep.Lines, &rep.Errors[0])
		}
	}
	return reqs, name, nil
}

// limitedSampleName names the first n of the embedded sample's total
// requests: trace.SampleName says "first 600 requests", the whole sample.
func limitedSampleName(n, total int) string {
	whole := fmt.Sprintf("first %d requests", total)
	if strings.Contains(trace.SampleName, whole) {
		return strings.Replace(trace.SampleName, whole, firstRequests(n), 1)
	}
	return fmt.Sprintf("%s, of which the first %d", trace.SampleName, n)
}

func writeJSONTo(path string, stdout io.Writer, rep jsonReport) (err error) {
	if path == "-" {
		return writeJSON(stdout, rep)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	return writeJSON(f, rep)
}

// blockSizes names the cache's block size and, where it differs, the size
// the trace's hash ids stand for (-trace-block-tokens).
func blockSizes(o options) string {
	if o.traceBlockTokens == o.blockTokens {
		return fmt.Sprintf("%d-token blocks", o.blockTokens)
	}
	return fmt.Sprintf("%d-token blocks (the trace's hash ids: %d tokens each)", o.blockTokens, o.traceBlockTokens)
}
