package scheduler

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kvtier/kvtier/trace"
)

// TestRandomRunsKeepTheBooks drives the scheduler over a small GPU with
// random traces and policies and checks, at the end of each run, what a
// run must account for: every request finished or rejected once, every
// sequence's blocks returned to the pool, the output tokens the served
// requests asked for, prompt tokens admitted once each at a first
// admission, one TTFT per served request, hits within what was presented.
func TestRandomRunsKeepTheBooks(t *testing.T) {
	var tot Result
	defer func() {
		t.Logf("over the runs: %d preemptions, %d swap fallbacks, %d rejected, %d onboarded, %d timed out, %d readmitted tokens",
			tot.Preemptions, tot.SwapFallbacks, tot.Rejected, tot.Onboarded, tot.TimedOutTransfers, tot.Readmissions.Tokens)
	}()
	for seed := range uint64(1000) {
		rng := rand.New(rand.NewPCG(seed, 7))
		bs := 16
		gpu := 4 + rng.IntN(12)
		var reqs []trace.Request
		var ms int64
		for i := range 2 + rng.IntN(25) {
			ms += int64(rng.IntN(30))
			in := 1 + rng.IntN(gpu*bs)
			ids := make([]int64, (in+trace.BlockTokens-1)/trace.BlockTokens)
			base := int64(rng.IntN(4)) * 1000 // shared prefixes
			if rng.IntN(3) == 0 {
				base = int64(i+10) * 1000
			}
			for j := range ids {
				ids[j] = base + int64(j)
			}
			reqs = append(reqs, trace.Request{Timestamp: ms, InputLength: in, OutputLength: rng.IntN(3 * bs), HashIDs: ids})
		}
		cost := simpleCost()
		cost.PinnedPerToken, cost.DiskPerToken = time.Duration(rng.IntN(100))*time.Microsecond, time.Duration(rng.IntN(1000))*time.Microsecond
		cfg := Config{
			MaxNumSeqs: 1 + rng.IntN(6), MaxNumBatchedTokens: 1 + rng.IntN(4*bs),
			Preempt: PreemptPolicy(1 + rng.IntN(2)), Onboard: OnboardPolicy(1 + rng.IntN(3)),
			OnboardTimeout: time.Duration(1+rng.IntN(20)) * time.Millisecond, OnboardTimeoutPer1K: time.Duration(rng.IntN(5)) * time.Millisecond,
			CostModel: cost, TraceBlockTokens: trace.BlockTokens, Vocab: 50,
		}
		if rng.IntN(2) == 0 {
			cfg.MaxSeqTokens = gpu * bs
		}
		f := newFakeCache(fakeConfig{gpuBlocks: gpu, pinnedBlocks: rng.IntN(3 * gpu), diskBlocks: rng.IntN(6 * gpu), blockSize: bs})
		f.lost = rng.IntN(2) * rng.IntN(3*bs) // tokens each load fails to bring
		f.noSwap = rng.IntN(2) == 0           // loads complete on return: a fake load that waits for later calls never completes while the logical clock waits on it
		name := fmt.Sprintf("seed %d (gpu %d blocks, %+v)", seed, gpu, cfg)
		s, err := New(f, reqs, cfg)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := runToEnd(s); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		res := s.Result()
		tot.Preemptions += res.Preemptions
		tot.SwapFallbacks += res.SwapFallbacks
		tot.Rejected += res.Rejected
		tot.Onboarded += res.Onboarded
		tot.TimedOutTransfers += res.TimedOutTransfers
		tot.Readmissions.Tokens += res.Readmissions.Tokens
		if res.Requests+res.Rejected != len(reqs) {
			t.Errorf("%s: %d served + %d rejected of %d", name, res.Requests, res.Rejected, len(reqs))
		}
		if free := f.pool.NumFree(); free != gpu {
			t.Errorf("%s: %d of %d GPU blocks free at the end: sequences still hold blocks", name, free, gpu)
		}
		var prompts, outputs int64
		for i, r := range reqs {
			q := s.seqs[i]
			switch q.phase {
			case phaseFinished:
				prompts += int64(r.InputLength)
				outputs += int64(cfg.target(r))
				if q.generated != cfg.target(r) {
					t.Errorf("%s: request %d generated %d of %d tokens", name, i, q.generated, cfg.target(r))
				}
			case phaseRejected:
				if q.firstOut || q.generated > 0 {
					// only with MaxSeqTokens 0: its outputs stay counted
					outputs += int64(q.generated)
				}
			default:
				t.Errorf("%s: request %d ended in phase %d", name, i, q.phase)
			}
		}
		if res.PromptTokens != prompts || res.OutputTokens < outputs {
			t.Errorf("%s: prompt tokens %d (want %d), output tokens %d (want at least %d)", name, res.PromptTokens, prompts, res.OutputTokens, outputs)
		}
		first := res.FirstAdmissions()
		if cfg.MaxSeqTokens > 0 && (first.Tokens != res.PromptTokens || res.OutputTokens != outputs) {
			t.Errorf("%s: first admissions present %d tokens, %d outputs; want the served prompts' %d and %d outputs",
				name, first.Tokens, res.OutputTokens, res.PromptTokens, outputs)
		}
		if h := first.Hits(); h < 0 || h > first.Tokens || res.Readmissions.Hits() > res.Readmissions.Tokens {
			t.Errorf("%s: hits %d of %d, readmissions %d of %d", name, h, first.Tokens, res.Readmissions.Hits(), res.Readmissions.Tokens)
		}
		if got := len(s.m.ttfts); got != res.Requests {
			t.Errorf("%s: %d TTFTs for %d served requests", name, got, res.Requests)
		}
		// Each served request's last admission computed what it did not
		// hit (a readmission may hit what others computed meanwhile, so
		// the first admission's misses are no bound).
		if miss := res.PromptTokens - first.Hits() - res.Readmissions.Hits(); res.PrefillTokens < miss {
			t.Errorf("%s: %d prefill tokens computed, fewer than the %d prompt tokens no admission hit", name, res.PrefillTokens, miss)
		}
		if res.Duration < 0 || res.TTFT.Max > res.Duration+time.Duration(ms)*time.Millisecond {
			t.Errorf("%s: duration %v, TTFT max %v", name, res.Duration, res.TTFT.Max)
		}
	}
}

// runToEnd steps s until every request finished or was rejected.
func runToEnd(s *Scheduler) error {
	for n := 0; !s.Done(); n++ {
		if n > 1_000_000 {
			return fmt.Errorf("no end after %d steps", n)
		}
		if _, err := s.Step(context.Background()); err != nil {
			return err
		}
	}
	return nil
}
