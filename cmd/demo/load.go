package main

import (
	"fmt"
	"time"

	"github.com/kvtier/kvtier/scheduler"
	"github.com/kvtier/kvtier/trace"
)

// offered is the work a trace brings to the modelled GPU with no cache at
// all, and the time it brings it in.
type offered struct {
	Prefill time.Duration // every prompt prefilled in full
	Decode  time.Duration // every output token after the first decoded
	Span    time.Duration // first to last arrival at the trace's own rate
}

// Work is the prefill and decode compute together.
func (w offered) Work() time.Duration { return w.Prefill + w.Decode }

// Load is the share of the GPU's time the work takes when the arrivals are
// stretched by timeScale: above 1 the queue only grows.
func (w offered) Load(timeScale float64) float64 {
	if w.Span <= 0 || timeScale <= 0 {
		return 0
	}
	return w.Work().Seconds() / (w.Span.Seconds() * timeScale)
}

// offeredWork prices reqs with the cost model's marginal compute
// (scheduler.WorkCoster): what each request costs the GPU when batched with
// others, without the per-step overhead and weight reads a batch shares. A
// prefix hit only lowers it, so on the GPU-only configuration, whose hit
// ratio is a few percent, it is close to the real demand. maxOutput caps
// output lengths as -max-output does (0: none).
func offeredWork(reqs []trace.Request, cost scheduler.WorkCoster, maxOutput int) offered {
	var w offered
	if len(reqs) == 0 {
		return w
	}
	for _, r := range reqs {
		out := max(r.OutputLength, 1)
		if maxOutput > 0 {
			out = min(out, maxOutput)
		}
		w.Prefill += cost.PrefillCompute(r.InputLength, 0)
		w.Decode += cost.DecodeCompute(out-1, r.InputLength) // the first token comes with the prefill
	}
	first, last := reqs[0].Timestamp, reqs[0].Timestamp
	for _, r := range reqs {
		first, last = min(first, r.Timestamp), max(last, r.Timestamp)
	}
	w.Span = time.Duration(last-first) * time.Millisecond
	return w
}

// defaultLoad is the offered load the default time scale aims at: the
// trace's prefill and decode compute with no cache (offeredWork) fills this
// share of its stretched span. The demo is about what a tier saves, measured
// against the GPU-only run. Past a load of 1 that run's queue grows for the
// whole run and its TTFT measures the backlog: the earlier fixed -time-scale 3
// offered 1.01 on the embedded sample (GPU-only TTFT p50 28 s, p99 82 s). Far
// below 1 every configuration answers as fast as the prompts' lengths allow
// and a tier's savings hardly show. The embedded sample's GPU-only run (TTFT
// p50/p90/p99; GPU busy: its share of the run spent in steps, which counts
// every small decode step at the full weight read):
//
//	load  time scale  GPU busy  TTFT p50   p90    p99
//	0.35     8.64       53%      2.7 s    9.6 s  21.7 s   (prompt lengths: the floor)
//	0.60     5.04       82%      3.3 s   12.2 s  22.4 s
//	0.70     4.32       90%      3.8 s   15.7 s  28.2 s
//	0.80     3.78       95%      6.0 s   22.6 s  36.5 s
//	0.85     3.56       97%      9.3 s   27.3 s  41.9 s
//	0.90     3.36       98%     14.5 s   34.1 s  48.2 s
//	1.01     3 (old)    99.6%   28.4 s   67.1 s  82.1 s
//
// (go run ./cmd/demo -configs gpu -load L, and -time-scale 3 for the last
// row; re-run on 2026-11-28, where the 0.80, 0.85 and 1.01 rows had drifted
// by up to 0.2 s since they were measured.)
// 0.8 is near saturation, where the trace's bursts (up to twice its mean
// rate over 10 s) queue for a while, and not past it; on the full
// conversation trace it chooses a scale of 3.6 (GPU-only TTFT p50 4.2 s,
// where scale 3 gave 66.5 s).
const defaultLoad = 0.8

// timeScaleFor returns the -time-scale that makes w a load of load: the
// arrivals are stretched until the work fills that share of their span. A
// trace whose requests all arrive at once has no rate to scale: 1.
func timeScaleFor(w offered, load float64) float64 {
	if w.Span <= 0 || w.Work() <= 0 || !(load > 0) {
		return 1
	}
	return w.Work().Seconds() / (w.Span.Seconds() * load)
}

// describe says, for the report, where the arrival rate comes from and what
// load it offers.
func (w offered) describe(timeScale, load float64, auto bool) string {
	if w.Span <= 0 {
		return fmt.Sprintf("every request that can run arrives at once, or there is one at most: no arrival rate for -load or -time-scale to scale\n"+
			"offered GPU work: with no cache, %.1f s of prefill and %.1f s of decode compute (batched, cost model below), all at time 0",
			w.Prefill.Seconds(), w.Decode.Seconds())
	}
	how := "-time-scale"
	if auto {
		how = fmt.Sprintf("chosen for -load %g", load)
	}
	rate := arrivalRate(timeScale)
	return fmt.Sprintf("arrivals at %s (%s)\n"+
		"offered GPU load %.2f: with no cache, %.1f s of prefill and %.1f s of decode compute (batched, cost model below) in %.1f s of arrivals (%.1f s at the trace's rate)",
		rate, how, w.Load(timeScale), w.Prefill.Seconds(), w.Decode.Seconds(), w.Span.Seconds()*timeScale, w.Span.Seconds())
}

// arrivalRate says how a time scale (arrival times multiplied by it) sets the
// arrival rate against the trace's own.
func arrivalRate(timeScale float64) string {
	switch {
	case timeScale == 1:
		return "the trace's own rate"
	case timeScale < 1:
		return fmt.Sprintf("%.3gx the trace's rate", 1/timeScale) // compressed
	}
	return fmt.Sprintf("1/%.3g of the trace's rate", timeScale) // stretched
}
