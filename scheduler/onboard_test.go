package scheduler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvtier/kvtier/trace"
)

// onboardRun replays b (a 1024-token prompt preloaded into tier) alone or
// behind a: a 2000-token prompt with no hits that keeps decoding.
func onboardSetup(t *testing.T, tier Tier, withA bool, cfg Config, tune func(*fakeCache)) (*fakeCache, *Scheduler) {
	t.Helper()
	b := req(0, 1024, 2, 100)
	reqs := []trace.Request{b}
	if withA {
		reqs = []trace.Request{req(0, 2000, 40, 0), b}
	}
	f := newFakeCache(fakeConfig{gpuBlocks: 1000, pinnedBlocks: 1000, diskBlocks: 1000, blockSize: 16})
	f.preload(tier, trace.Tokens(b, DefaultVocab), "")
	if tune != nil {
		tune(f)
	}
	return f, mustNew(t, f, reqs, cfg)
}

// firstStep returns the index of the first step that computed seq.
func firstStep(reps []StepReport, seq SeqID) int {
	for i, rep := range reps {
		for _, sc := range rep.Scheduled {
			if sc.Seq == seq {
				return i
			}
		}
	}
	return -1
}

func TestBestEffort(t *testing.T) {
	cost := simpleCost()
	_, s := onboardSetup(t, TierPinned, false, Config{Onboard: BestEffort, CostModel: cost}, nil)
	reps := steps(t, s)
	r := s.Result()
	if r.PinnedTokens != 1023 || r.PrefillTokens != 1 || r.Onboarded != 0 {
		t.Fatalf("complete load: pinned %d prefill %d onboarded %d; want 1023, 1, 0", r.PinnedTokens, r.PrefillTokens, r.Onboarded)
	}
	if reps[0].Idle || r.TTFT.P50 != cost.Step+cost.PerToken {
		t.Fatalf("best effort waited: first step %+v, TTFT %v", reps[0], r.TTFT.P50)
	}

	// The load is still in flight at admission: everything is recomputed.
	_, s = onboardSetup(t, TierPinned, false, Config{Onboard: BestEffort, CostModel: cost}, func(f *fakeCache) { f.readyAfter = 5 })
	steps(t, s)
	if r := s.Result(); r.PinnedTokens != 0 || r.PrefillTokens != 1024 {
		t.Fatalf("incomplete load: pinned %d prefill %d; want 0, 1024", r.PinnedTokens, r.PrefillTokens)
	}
}

func TestWaitDoesNotHoldUpOthers(t *testing.T) {
	cost := simpleCost() // disk: 20 µs a token, so 1024 tokens take 20.48 ms
	_, s := onboardSetup(t, TierDisk, true, Config{Onboard: Wait, CostModel: cost}, nil)
	reps := steps(t, s)
	if sc := reps[0].Scheduled; len(sc) != 1 || sc[0].Seq != 1 {
		t.Fatalf("first step scheduled %+v, want only the sequence with no load", sc)
	}
	if len(reps[0].Admitted) != 2 {
		t.Fatalf("first step admitted %v, want both", reps[0].Admitted)
	}
	i := firstStep(reps, 2)
	if readyAt := 1024 * cost.DiskPerToken; reps[i].Start < readyAt || reps[i-1].Start >= readyAt {
		t.Fatalf("loading sequence first ran in the step at %v; its load ends at %v", reps[i].Start, readyAt)
	}
	r := s.Result()
	if r.DiskTokens != 1023 || r.Onboarded != 1 || r.TimedOutTransfers != 0 || r.PrefillTokens != 2000+1 {
		t.Fatalf("disk %d onboarded %d timed out %d prefill %d", r.DiskTokens, r.Onboarded, r.TimedOutTransfers, r.PrefillTokens)
	}
}

func TestWaitAlone(t *testing.T) {
	cost := simpleCost()
	cost.DiskPerToken = 200 * time.Microsecond // 204.8 ms for the prefix
	_, s := onboardSetup(t, TierDisk, false, Config{Onboard: Wait, CostModel: cost}, nil)
	reps := steps(t, s)
	if !reps[0].Idle || reps[0].End != 1024*cost.DiskPerToken {
		t.Fatalf("first step %+v: want idle until the modelled load ends", reps[0])
	}
	r := s.Result()
	if want := 1024*cost.DiskPerToken + cost.Step + cost.PerToken; r.TTFT.P50 != want || r.DiskTokens != 1023 {
		t.Fatalf("TTFT %v disk %d; want %v and 1023", r.TTFT.P50, r.DiskTokens, want)
	}
}

func TestWaitForLateReady(t *testing.T) {
	// The modelled load is over after one step but the cache closes Ready only
	// three calls later; the sequence waits for it.
	cost := simpleCost()
	_, s := onboardSetup(t, TierPinned, true, Config{Onboard: Wait, CostModel: cost}, func(f *fakeCache) { f.readyAfter = 3 })
	reps := steps(t, s)
	// Calls: Allocate (1), Append (2), Append (3), Append (4) closes it; the
	// sequence runs in the step after.
	if i := firstStep(reps, 2); i != 4 {
		t.Fatalf("loading sequence first ran in step %d, want 4", i)
	}
	if r := s.Result(); r.PinnedTokens != 1023 || r.TimedOutTransfers != 0 {
		t.Fatalf("pinned %d timed out %d", r.PinnedTokens, r.TimedOutTransfers)
	}
}

func TestWaitPartialLoad(t *testing.T) {
	_, s := onboardSetup(t, TierPinned, false, Config{Onboard: Wait, CostModel: simpleCost()}, func(f *fakeCache) { f.lost = 100 })
	steps(t, s)
	if r := s.Result(); r.PinnedTokens != 924 || r.PrefillTokens != 100 {
		t.Fatalf("pinned %d prefill %d; want 924 and 100", r.PinnedTokens, r.PrefillTokens)
	}
}

func TestWaitBlocksOnReadyUntilContextEnds(t *testing.T) {
	_, s := onboardSetup(t, TierPinned, false, Config{Onboard: Wait, CostModel: simpleCost()}, func(f *fakeCache) { f.readyAfter = 1000 })
	if _, err := s.Step(context.Background()); err != nil { // admits, jumps to the modelled end
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
	defer cancel()
	if _, err := s.Step(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the context's error", err)
	}
}

func TestTimeout(t *testing.T) {
	cfg := func(disk time.Duration) Config {
		cost := simpleCost()
		cost.DiskPerToken = disk
		return Config{Onboard: Timeout, CostModel: cost, OnboardTimeout: 10 * time.Millisecond, OnboardTimeoutPer1K: 40 * time.Millisecond}
	}
	deadline := 10*time.Millisecond + 40*time.Millisecond*1024/1000 // 50.96 ms

	// 204.8 ms of transfer: gives up at the deadline with a quarter arrived.
	c := cfg(200 * time.Microsecond)
	_, s := onboardSetup(t, TierDisk, false, c, nil)
	reps := steps(t, s)
	if !reps[0].Idle || reps[0].End != deadline {
		t.Fatalf("first step %+v, want idle until the deadline %v", reps[0], deadline)
	}
	r := s.Result()
	arrived := int64(1024 * float64(deadline) / float64(1024*200*time.Microsecond))
	if r.TimedOutTransfers != 1 || r.DiskTokens != arrived || r.PrefillTokens != 1024-arrived {
		t.Fatalf("timed out %d disk %d prefill %d; want 1, %d, %d", r.TimedOutTransfers, r.DiskTokens, r.PrefillTokens, arrived, 1024-arrived)
	}
	if want := deadline + c.CostModel.StepTime([]Work{{Tokens: int(1024 - arrived)}}); r.TTFT.P50 != want {
		t.Fatalf("TTFT %v, want %v", r.TTFT.P50, want)
	}

	// 20.48 ms of transfer: within the allowance.
	_, s = onboardSetup(t, TierDisk, false, cfg(20*time.Microsecond), nil)
	steps(t, s)
	if r := s.Result(); r.TimedOutTransfers != 0 || r.DiskTokens != 1023 {
		t.Fatalf("fast load: timed out %d disk %d", r.TimedOutTransfers, r.DiskTokens)
	}

	// Ready does not close in time (another sequence's steps pass the
	// deadline): nothing counts as arrived.
	_, s = onboardSetup(t, TierDisk, true, cfg(20*time.Microsecond), func(f *fakeCache) { f.readyAfter = 1000 })
	steps(t, s)
	if r := s.Result(); r.TimedOutTransfers != 1 || r.DiskTokens != 0 || r.PrefillTokens != 2000+1024 {
		t.Fatalf("stuck load: timed out %d disk %d prefill %d", r.TimedOutTransfers, r.DiskTokens, r.PrefillTokens)
	}
}
