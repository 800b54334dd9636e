package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/kvtier/kvtier/trace"
)

// TestFirstAdmissionsArePrompts: every request's prefix is counted once at
// its first admission, whose tokens are its prompt, and every later
// admission (after a preemption) as a readmission; a sequence preempted
// while its load was in flight was never counted, so its next admission is
// its first. The runs preempt, some of them onboarding sequences.
func TestFirstAdmissionsArePrompts(t *testing.T) {
	syn := trace.DefaultSyntheticConfig()
	syn.Sessions, syn.Concurrency, syn.RatePerSecond = 40, 16, 20
	syn.SystemTokens, syn.UserTokens, syn.MaxInputTokens = trace.IntRange{Min: 512, Max: 2048}, trace.IntRange{Min: 64, Max: 1024}, 12288
	reqs, err := trace.Synthetic(syn)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name       string
		readyAfter int
		cfg        Config
	}{
		{"recompute", 0, Config{MaxOutputTokens: 256}},
		{"swap", 0, Config{Preempt: Swap, MaxOutputTokens: 256}},
		{"recompute, loads over 3 calls", 3, Config{MaxOutputTokens: 256}},
		{"swap, loads over 3 calls", 3, Config{Preempt: Swap, MaxOutputTokens: 256}},
	} {
		f := newFakeCache(fakeConfig{gpuBlocks: 300, pinnedBlocks: 200, diskBlocks: 1000, blockSize: 64})
		f.readyAfter = c.readyAfter
		r, err := Run(context.Background(), f, reqs, c.cfg)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		first := r.FirstAdmissions()
		if r.Preemptions == 0 || r.Readmissions.Tokens == 0 {
			t.Fatalf("%s: %d preemptions, %d readmitted tokens: the run shows nothing", c.name, r.Preemptions, r.Readmissions.Tokens)
		}
		if first.Tokens != r.PromptTokens {
			t.Errorf("%s: first admissions counted %d tokens, the prompts hold %d (%d admitted, %d readmitted; %d preemptions)",
				c.name, first.Tokens, r.PromptTokens, r.AdmittedTokens, r.Readmissions.Tokens, r.Preemptions)
		}
		if h := first.Hits(); h < 0 || h >= first.Tokens || first.GPU < 0 || first.Pinned < 0 || first.Disk < 0 {
			t.Errorf("%s: first admissions %+v", c.name, first)
		}
	}
}

// TestPreemptedWhileOnboarding: sequences 3 and 4 find their prompts in
// pinned memory and are preempted while the load is modelled as in flight,
// before their prefix was counted. Their next admission is their first.
func TestPreemptedWhileOnboarding(t *testing.T) {
	const vocab = 1000
	var reqs []trace.Request
	for i := range 4 {
		reqs = append(reqs, req(0, 8, 6, int64(100*i)))
	}
	f := newFakeCache(fakeConfig{gpuBlocks: 8, pinnedBlocks: 64, blockSize: 4})
	for _, r := range reqs[2:] {
		f.preload(TierPinned, trace.TokensOf(r, trace.BlockTokens, vocab), "")
	}
	cost := simpleCost()
	cost.PinnedPerToken = 100 * time.Millisecond // the loads outlast several steps
	s := mustNew(t, f, reqs, Config{CostModel: cost, Vocab: vocab})
	var onboardingVictims int
	for !s.Done() {
		onboarding := map[SeqID]bool{}
		for _, q := range s.running {
			onboarding[q.id] = q.phase == phaseOnboarding
		}
		rep, err := s.Step(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range rep.Preempted {
			if onboarding[v] {
				onboardingVictims++
			}
		}
	}
	r := s.Result()
	if onboardingVictims == 0 {
		t.Fatalf("no sequence was preempted while onboarding: the test shows nothing (%d preemptions)", r.Preemptions)
	}
	if first := r.FirstAdmissions(); first.Tokens != r.PromptTokens || first.Pinned == 0 {
		t.Errorf("%d onboarding victims: first admissions %+v, prompts %d tokens; readmissions %+v",
			onboardingVictims, first, r.PromptTokens, r.Readmissions)
	}
}
