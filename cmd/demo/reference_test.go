package main

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/kvtier/kvtier/scheduler"
	"github.com/kvtier/kvtier/trace"
)

// TestReplayMatchesReferenceModel replays a trace through the demo's GPU
// column, with a GPU that never evicts, and through a reference model
// written from the scheduler's documentation alone: first come, first
// served admission within MaxNumBatchedTokens, running sequences first in
// admission order, chunked prefill, a step priced by the cost model, one
// output token when a sequence's tokens are all computed, and a prefix hit
// on the full blocks that earlier steps computed (commit before cache),
// less the last prompt token. The demo's hit ratio, prefill tokens, TTFT
// percentiles, run length and GPU busy time must be the model's. (The same
// model, in Python, matched the embedded sample at -gpu-blocks 24576
// -time-scale 4 to the nanosecond: 17.12% hits, TTFT p50 2.879 s.)
func TestReplayMatchesReferenceModel(t *testing.T) {
	path, reqs := smallTrace(t)
	const blockTokens, maxBatched = 128, 2048
	rep, table := runJSON(t, []string{"-trace", path, "-configs", "gpu", "-block-tokens", fmt.Sprint(blockTokens), "-gpu-blocks", "4096",
		"-max-batched-tokens", fmt.Sprint(maxBatched), "-time-scale", "1", "-vocab", "5000"})
	c := rep.Configs[0]
	if c.Preemptions != 0 || c.Requests != len(reqs) {
		t.Fatalf("%d preemptions, %d requests served: the model has neither preemption nor rejection\n%s", c.Preemptions, c.Requests, table)
	}
	want := referenceRun(reqs, blockTokens, maxBatched, scheduler.DefaultMaxNumSeqs, scheduler.DefaultCostModel())

	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-6*math.Max(1, math.Abs(want)) {
			t.Errorf("%s: demo %v, reference model %v", name, got, want)
		}
	}
	near("hit ratio", c.HitRatio, want.hitRatio)
	near("prefill tokens", float64(c.PrefillTokens), float64(want.prefill))
	near("TTFT p50 (ms)", c.TTFTMillis.P50, ms(want.ttft.P50))
	near("TTFT p90 (ms)", c.TTFTMillis.P90, ms(want.ttft.P90))
	near("TTFT p99 (ms)", c.TTFTMillis.P99, ms(want.ttft.P99))
	near("TTFT max (ms)", c.TTFTMillis.Max, ms(want.ttft.Max))
	near("run length (s)", c.DurationS, want.duration.Seconds())
	near("GPU busy (s)", c.GPUBusyS, want.busy.Seconds())
	t.Logf("demo and model: hits %.4f%%, prefill %d, TTFT p50 %.1f ms, run %.3f s", 100*want.hitRatio, want.prefill, ms(want.ttft.P50), want.duration.Seconds())
	if want.hitRatio == 0 {
		t.Error("the trace has no prefix hits: the comparison tests little")
	}
}

// reference is the reference model's outcome.
type reference struct {
	hitRatio       float64
	prefill        int64
	ttft           scheduler.TTFT
	duration, busy time.Duration
}

// referenceRun is the reference model of TestReplayMatchesReferenceModel.
func referenceRun(reqs []trace.Request, blockTokens, maxBatched, maxSeqs int, cost scheduler.CostModel) reference {
	type seq struct {
		arrival                  time.Duration
		prompt, tokens, computed int
		target, generated        int
		keys                     []string // each full prompt block's prefix
		firstDone                bool
	}
	seqs := make([]*seq, len(reqs))
	for i, r := range reqs {
		q := &seq{arrival: time.Duration(r.Timestamp) * time.Millisecond, prompt: r.InputLength, tokens: r.InputLength,
			target: max(r.OutputLength, 1)}
		for b := 0; (b+1)*blockTokens <= r.InputLength; b++ {
			last := ((b+1)*blockTokens - 1) / trace.BlockTokens
			q.keys = append(q.keys, fmt.Sprint(r.HashIDs[:last+1], (b+1)*blockTokens-last*trace.BlockTokens))
		}
		seqs[i] = q
	}
	committed := map[string]bool{}
	var out reference
	var waiting, running []*seq
	var ttfts []time.Duration
	var now, last time.Duration
	var hits, prompts int64
	next, done := 0, 0
	for done < len(seqs) {
		for next < len(seqs) && seqs[next].arrival <= now {
			waiting = append(waiting, seqs[next])
			next++
		}
		type part struct {
			q *seq
			n int
		}
		var batch []part
		budget := maxBatched
		for _, q := range running {
			if budget == 0 {
				break
			}
			n := min(q.tokens-q.computed, budget)
			batch, budget = append(batch, part{q, n}), budget-n
		}
		charge, admit := budget, 0
		for charge > 0 && len(running)+admit < maxSeqs && admit < len(waiting) {
			charge -= min(waiting[admit].tokens, charge)
			admit++
		}
		for _, q := range waiting[:admit] {
			h := 0
			for h < len(q.keys) && committed[q.keys[h]] {
				h++
			}
			q.computed = min(h*blockTokens, q.tokens-1)
			hits, prompts = hits+int64(q.computed), prompts+int64(q.prompt)
			running = append(running, q)
			if budget > 0 {
				n := min(q.tokens-q.computed, budget)
				batch, budget = append(batch, part{q, n}), budget-n
			}
		}
		waiting = waiting[admit:]
		if len(batch) == 0 {
			now = seqs[next].arrival
			continue
		}
		work := make([]scheduler.Work, len(batch))
		for i, p := range batch {
			work[i] = scheduler.Work{Tokens: p.n, Context: p.q.computed}
		}
		d := cost.StepTime(work)
		now += d
		out.busy += d
		last = now
		for _, p := range batch {
			q := p.q
			if q.computed < q.prompt {
				out.prefill += int64(p.n)
			}
			q.computed += p.n
			for _, k := range q.keys[:min(q.computed/blockTokens, len(q.keys))] {
				committed[k] = true
			}
			if q.computed < q.tokens {
				continue
			}
			if !q.firstDone {
				q.firstDone = true
				ttfts = append(ttfts, now-q.arrival)
			}
			if q.generated++; q.generated < q.target {
				q.tokens++
				continue
			}
			done++
			running = slices.DeleteFunc(running, func(r *seq) bool { return r == q })
		}
	}
	slices.Sort(ttfts)
	rank := func(p float64) time.Duration {
		return ttfts[min(max(int(math.Ceil(p*float64(len(ttfts))))-1, 0), len(ttfts)-1)]
	}
	out.ttft = scheduler.TTFT{P50: rank(0.5), P90: rank(0.9), P99: rank(0.99), Max: ttfts[len(ttfts)-1]}
	out.hitRatio = float64(hits) / float64(prompts)
	out.duration = last - seqs[0].arrival
	return out
}
