package scheduler

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/kvtier/kvtier/trace"
)

func TestAdmissionMaxNumSeqs(t *testing.T) {
	var reqs []trace.Request
	for i := range 10 {
		reqs = append(reqs, req(0, 40, 5, int64(100*i)))
	}
	f := newFakeCache(fakeConfig{gpuBlocks: 1000, blockSize: 16})
	s := mustNew(t, f, reqs, Config{MaxNumSeqs: 3, CostModel: simpleCost()})
	rep, err := s.Step(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := []SeqID{1, 2, 3}; !slices.Equal(rep.Admitted, want) {
		t.Fatalf("first step admitted %v, want %v", rep.Admitted, want)
	}
	if want := []SeqID{4, 5, 6, 7, 8, 9, 10}; !slices.Equal(s.Waiting(), want) {
		t.Fatalf("waiting %v, want %v", s.Waiting(), want)
	}
	for !s.Done() {
		if _, err := s.Step(context.Background()); err != nil {
			t.Fatal(err)
		}
		if n := len(s.Running()); n > 3 {
			t.Fatalf("%d sequences running, limit 3", n)
		}
	}
	if r := s.Result(); r.Requests != 10 || r.OutputTokens != 50 {
		t.Fatalf("finished %d requests, %d tokens; want 10 and 50", r.Requests, r.OutputTokens)
	}
}

func TestAdmissionTokenBudget(t *testing.T) {
	var reqs []trace.Request
	for i := range 6 {
		reqs = append(reqs, req(0, 100, 3, int64(100*i)))
	}
	f := newFakeCache(fakeConfig{gpuBlocks: 1000, blockSize: 16})
	s := mustNew(t, f, reqs, Config{MaxNumBatchedTokens: 250, CostModel: simpleCost()})
	reps := steps(t, s)
	first := reps[0]
	if !slices.Equal(first.Admitted, []SeqID{1, 2, 3}) {
		t.Fatalf("first step admitted %v, want 1..3 (100+100+50 tokens)", first.Admitted)
	}
	want := []Scheduled{{1, 100, true}, {2, 100, true}, {3, 50, true}}
	if !reflect.DeepEqual(first.Scheduled, want) {
		t.Fatalf("first step scheduled %+v, want %+v", first.Scheduled, want)
	}
	for i, rep := range reps {
		if n := scheduledTokens(rep); n > 250 {
			t.Fatalf("step %d computed %d tokens, budget 250", i, n)
		}
	}
	// Step 2: 1 and 2 decode, 3 finishes its prompt, then 4 fits in what is left.
	second := reps[1]
	want = []Scheduled{{1, 1, false}, {2, 1, false}, {3, 50, true}, {4, 100, true}}
	if !reflect.DeepEqual(second.Scheduled[:4], want) {
		t.Fatalf("second step scheduled %+v, want prefix %+v", second.Scheduled, want)
	}
}

func TestChunkedPrefill(t *testing.T) {
	cost := simpleCost()
	f := newFakeCache(fakeConfig{gpuBlocks: 1000, blockSize: 16})
	s := mustNew(t, f, []trace.Request{req(0, 1000, 2, 0)}, Config{MaxNumBatchedTokens: 256, CostModel: cost})
	reps := steps(t, s)
	var got []int
	for _, rep := range reps {
		for _, sc := range rep.Scheduled {
			got = append(got, sc.Tokens)
		}
	}
	if want := []int{256, 256, 256, 232, 1}; !slices.Equal(got, want) {
		t.Fatalf("chunks %v, want %v", got, want)
	}
	r := s.Result()
	if r.PrefillTokens != 1000 {
		t.Fatalf("prefill tokens %d, want 1000", r.PrefillTokens)
	}
	// The first token comes at the end of the fourth step.
	wantTTFT := 4*cost.Step + 1000*cost.PerToken
	if r.TTFT.P50 != wantTTFT || reps[3].End != wantTTFT {
		t.Fatalf("TTFT %v (4th step ends %v), want %v", r.TTFT.P50, reps[3].End, wantTTFT)
	}
}

func TestPrefixHitSkipsPrefill(t *testing.T) {
	// Two requests with the same 1024-token prompt, the second after the first
	// is done: its prompt is on the GPU but for the last token.
	reqs := []trace.Request{req(0, 1024, 2, 0), req(10_000, 1024, 2, 0)}
	f := newFakeCache(fakeConfig{gpuBlocks: 1000, blockSize: 16})
	r, err := Run(context.Background(), f, reqs, Config{CostModel: simpleCost()})
	if err != nil {
		t.Fatal(err)
	}
	if r.GPUTokens != 1023 || r.PrefillTokens != 1024+1 || r.AdmittedTokens != 2048 {
		t.Fatalf("gpu %d prefill %d admitted %d; want 1023, 1025, 2048", r.GPUTokens, r.PrefillTokens, r.AdmittedTokens)
	}
	if r.HitRatio != 1023.0/2048 {
		t.Fatalf("hit ratio %v", r.HitRatio)
	}
}

// preemptSetup: four 8-token prompts (two 4-token blocks each) in an 8-block
// pool. After the first step every sequence needs a third block and none is free.
func preemptSetup(t *testing.T, policy PreemptPolicy, noSwap bool) (*fakeCache, *Scheduler) {
	var reqs []trace.Request
	for i := range 4 {
		reqs = append(reqs, req(0, 8, 6, int64(100*i)))
	}
	f := newFakeCache(fakeConfig{gpuBlocks: 8, pinnedBlocks: 64, blockSize: 4})
	f.noSwap = noSwap
	return f, mustNew(t, f, reqs, Config{Preempt: policy, CostModel: simpleCost()})
}

func TestPreemptionOrder(t *testing.T) {
	f, s := preemptSetup(t, Recompute, false)
	ctx := context.Background()
	if _, err := s.Step(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err := s.Step(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// 1 and 2 fail first; each preempts the most recently admitted: 4, then 3.
	if want := []SeqID{4, 3}; !slices.Equal(rep.Preempted, want) {
		t.Fatalf("preempted %v, want %v", rep.Preempted, want)
	}
	if want := []SeqID{3, 4}; !slices.Equal(s.Waiting(), want) {
		t.Fatalf("waiting %v, want %v (front of the queue, earliest admitted first)", s.Waiting(), want)
	}
	if want := []SeqID{1, 2}; !slices.Equal(s.Running(), want) {
		t.Fatalf("running %v, want %v", s.Running(), want)
	}
	if len(rep.Admitted) != 0 {
		t.Fatalf("admitted %v in a step that preempted", rep.Admitted)
	}
	if f.freed[3] != 1 || f.freed[4] != 1 {
		t.Fatalf("victims freed %v", f.freed)
	}
	for !s.Done() {
		if _, err := s.Step(ctx); err != nil {
			t.Fatal(err)
		}
	}
	r := s.Result()
	if r.Requests != 4 || r.OutputTokens != 24 || r.Preemptions < 2 {
		t.Fatalf("result %+v", r)
	}
	// Readmitted victims prefill their prompt and the token they had sampled.
	if r.AdmittedTokens <= 4*8 {
		t.Fatalf("admitted tokens %d: victims were not readmitted with their output", r.AdmittedTokens)
	}
}

func TestPreemptionBySwap(t *testing.T) {
	f, s := preemptSetup(t, Swap, false)
	steps(t, s)
	r := s.Result()
	if len(f.swapped) == 0 || r.Preemptions != len(f.swapped) || r.SwapFallbacks != 0 {
		t.Fatalf("swapped %v, preemptions %d, fallbacks %d", f.swapped, r.Preemptions, r.SwapFallbacks)
	}
	if r.PinnedTokens == 0 {
		t.Fatal("swapped-out sequences found nothing in pinned memory on readmission")
	}

	f, s = preemptSetup(t, Swap, true /* noSwap */)
	steps(t, s)
	r = s.Result()
	if len(f.swapped) != 0 || r.SwapFallbacks != r.Preemptions || r.Preemptions == 0 {
		t.Fatalf("unsupported swap: swapped %v, preemptions %d, fallbacks %d", f.swapped, r.Preemptions, r.SwapFallbacks)
	}
}

func TestFinishingFreesBlocks(t *testing.T) {
	reqs := trace.Sample()[:60]
	f := newFakeCache(fakeConfig{gpuBlocks: 4096, blockSize: 64})
	r, err := Run(context.Background(), f, reqs, Config{MaxOutputTokens: 16})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != len(reqs) {
		t.Fatalf("finished %d of %d", r.Requests, len(reqs))
	}
	st := f.pool.Stats()
	if st.Used != 0 || st.Sequences != 0 || st.Free != st.NumBlocks {
		t.Fatalf("blocks still held after the run: %+v", st)
	}
	for i := range reqs {
		if n := f.freed[SeqID(i+1)]; n < 1 {
			t.Fatalf("sequence %d freed %d times", i+1, n)
		}
	}
}

func TestAllocateFailureKeepsFCFS(t *testing.T) {
	// 1 takes 6 of 8 blocks; 2 (3 blocks) cannot fit, 3 (1 block) could, but
	// must not overtake 2.
	reqs := []trace.Request{req(0, 24, 4, 0), req(0, 12, 1, 100), req(0, 4, 1, 200)}
	f := newFakeCache(fakeConfig{gpuBlocks: 8, blockSize: 4})
	s := mustNew(t, f, reqs, Config{CostModel: simpleCost()})
	rep, err := s.Step(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Admitted, []SeqID{1}) || !slices.Equal(s.Waiting(), []SeqID{2, 3}) {
		t.Fatalf("admitted %v, waiting %v; want [1] and [2 3]", rep.Admitted, s.Waiting())
	}
	if f.freed[3] != 1 {
		t.Fatalf("3 was allocated out of order and not freed again: %v", f.freed)
	}
	steps(t, s)
	if r := s.Result(); r.Requests != 3 || r.Requeued != 1 {
		t.Fatalf("finished %d, requeued %d; want 3 and 1 (sequence 3 once)", r.Requests, r.Requeued)
	}
}

func TestIdleJumpsToArrival(t *testing.T) {
	f := newFakeCache(fakeConfig{gpuBlocks: 100, blockSize: 16})
	s := mustNew(t, f, []trace.Request{req(3_600_000, 10, 1, 0)}, Config{CostModel: simpleCost()})
	rep, err := s.Step(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Idle || s.Now() != time.Hour {
		t.Fatalf("idle %v now %v, want a jump to 1h", rep.Idle, s.Now())
	}
	steps(t, s)
	if r := s.Result(); r.TTFT.P50 != 10*time.Millisecond+100*time.Microsecond {
		t.Fatalf("TTFT %v", r.TTFT.P50)
	}
}

func TestTimeScaleAndSalt(t *testing.T) {
	reqs := []trace.Request{req(0, 512, 1, 0), req(1000, 512, 1, 0)}
	salt := func(i int, _ trace.Request) string { return []string{"a", "b"}[i] }
	f := newFakeCache(fakeConfig{gpuBlocks: 100, blockSize: 16})
	r, err := Run(context.Background(), f, reqs, Config{TimeScale: 0.5, Salt: salt, CostModel: simpleCost(), SeriesInterval: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.GPUTokens != 0 {
		t.Fatalf("different tenants shared %d tokens", r.GPUTokens)
	}
	if got := r.Series[5].Arrivals; got != 1 {
		t.Fatalf("second arrival not at 500 ms: series %+v", r.Series)
	}
}

func TestConfigValidation(t *testing.T) {
	f := newFakeCache(fakeConfig{gpuBlocks: 4, blockSize: 4})
	bad := []Config{
		{MaxNumSeqs: -1}, {MaxNumBatchedTokens: -1}, {Preempt: 7}, {Onboard: 9},
		{Clock: 3}, {TimeScale: -1}, {OnboardTimeout: -time.Second}, {Vocab: -2},
	}
	for _, c := range bad {
		if _, err := New(f, nil, c); !errors.Is(err, ErrBadConfig) {
			t.Fatalf("%+v: got %v, want ErrBadConfig", c, err)
		}
	}
	unsorted := []trace.Request{req(5, 10, 1, 0), req(1, 10, 1, 1)}
	if _, err := New(f, unsorted, Config{}); !errors.Is(err, ErrBadConfig) {
		t.Fatalf("unsorted trace: %v", err)
	}
	cfg := Config{MaxNumSeqs: 0}
	if _, err := New(f, nil, cfg); err != nil || cfg.MaxNumSeqs != 0 || cfg.CostModel != nil {
		t.Fatalf("New changed the caller's config or failed: %+v %v", cfg, err)
	}
	s, _ := New(f, nil, Config{})
	if _, err := s.Step(context.Background()); !errors.Is(err, ErrDone) {
		t.Fatalf("empty run: %v", err)
	}
}

func TestDeterminism(t *testing.T) {
	t.Parallel()
	syn := trace.DefaultSyntheticConfig()
	syn.Sessions, syn.Concurrency, syn.RatePerSecond = 40, 16, 20
	syn.SystemTokens, syn.UserTokens, syn.MaxInputTokens = trace.IntRange{Min: 512, Max: 2048}, trace.IntRange{Min: 64, Max: 1024}, 12288
	synthetic, err := trace.Synthetic(syn)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		reqs []trace.Request
		fc   fakeConfig
		cfg  Config
	}{
		{"sample", trace.Sample()[:50], fakeConfig{gpuBlocks: 1000, pinnedBlocks: 1000, diskBlocks: 4000, blockSize: 128},
			Config{MaxOutputTokens: 16, Onboard: Timeout}},
		{"synthetic", synthetic, fakeConfig{gpuBlocks: 300, pinnedBlocks: 200, diskBlocks: 1000, blockSize: 64},
			Config{Preempt: Swap, MaxOutputTokens: 256}},
	}
	for _, c := range cases {
		run := func() Result {
			r, err := Run(context.Background(), newFakeCache(c.fc), c.reqs, c.cfg)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			return r
		}
		a, b := run(), run()
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("%s: two runs differ:\n%+v\n%+v", c.name, a, b)
		}
		t.Logf("%s: %d requests, hit %.3f (gpu %d pinned %d disk %d), %d preemptions, %d onboarded",
			c.name, a.Requests, a.HitRatio, a.GPUTokens, a.PinnedTokens, a.DiskTokens, a.Preemptions, a.Onboarded)
		// The sample's 50 requests reuse little after eviction now that only
		// committed blocks are cached; the synthetic run must reach the lower tiers.
		if a.Requests != len(c.reqs) || (c.name == "synthetic" && a.PinnedTokens+a.DiskTokens == 0) {
			t.Fatalf("%s: run does not exercise the lower tiers: %+v", c.name, a)
		}
		if c.name == "synthetic" && a.Preemptions == 0 {
			t.Fatalf("%s: no preemptions", c.name)
		}
	}
}

// TestMoreCapacityLessPrefill replays the embedded Mooncake sample (its first
// 120 requests under the race detector) with growing GPU caches: the prefill
// tokens computed never go up.
func TestMoreCapacityLessPrefill(t *testing.T) {
	t.Parallel()
	reqs := trace.Sample()
	if raceEnabled {
		reqs = reqs[:120]
	}
	prev := int64(-1)
	for _, blocks := range []int{2048, 4096, 16384, 65536} {
		f := newFakeCache(fakeConfig{gpuBlocks: blocks, blockSize: 64})
		r, err := Run(context.Background(), f, reqs, Config{MaxOutputTokens: 32})
		if err != nil {
			t.Fatalf("%d blocks: %v", blocks, err)
		}
		t.Logf("%6d blocks: prefill %d, hit ratio %.3f, preemptions %d, TTFT p50 %v p99 %v, %d steps",
			blocks, r.PrefillTokens, r.HitRatio, r.Preemptions, r.TTFT.P50, r.TTFT.P99, r.Steps)
		if r.Requests != len(reqs) {
			t.Fatalf("%d blocks: %d requests finished", blocks, r.Requests)
		}
		if prev >= 0 && r.PrefillTokens > prev {
			t.Fatalf("%d blocks computed %d prefill tokens, more than %d with fewer blocks", blocks, r.PrefillTokens, prev)
		}
		prev = r.PrefillTokens
	}
}

func TestProgressAndSeries(t *testing.T) {
	reqs := trace.Sample()[:50]
	var calls, last int
	f := newFakeCache(fakeConfig{gpuBlocks: 4096, blockSize: 64})
	r, err := Run(context.Background(), f, reqs, Config{MaxOutputTokens: 8, Progress: func(p Progress) {
		calls++
		if p.Finished < last || p.Total != 50 {
			t.Fatalf("progress %+v after %d", p, last)
		}
		last = p.Finished
	}})
	if err != nil {
		t.Fatal(err)
	}
	if calls != r.Steps || last != 50 {
		t.Fatalf("%d progress calls for %d steps, last %d", calls, r.Steps, last)
	}
	arrivals, admitted := 0, int64(0)
	for _, p := range r.Series {
		arrivals += p.Arrivals
		admitted += p.AdmittedTokens
	}
	if arrivals != 50 || admitted != r.AdmittedTokens {
		t.Fatalf("series sums %d arrivals, %d tokens; want 50, %d", arrivals, admitted, r.AdmittedTokens)
	}
	if r.TTFT.P50 > r.TTFT.P90 || r.TTFT.P90 > r.TTFT.P99 || r.TTFT.P99 > r.TTFT.Max || r.OutputTokensPerS <= 0 || r.RequestsPerS <= 0 {
		t.Fatalf("summary %+v", r)
	}
}

func TestWallClock(t *testing.T) {
	// A zero-cost model and arrivals at 0 ms: the run takes no real waiting.
	reqs := []trace.Request{req(0, 100, 3, 0), req(0, 100, 3, 1000)}
	f := newFakeCache(fakeConfig{gpuBlocks: 100, blockSize: 16})
	r, err := Run(context.Background(), f, reqs, Config{Clock: Wall, CostModel: &unitCost{}})
	if err != nil {
		t.Fatal(err)
	}
	if r.Requests != 2 || r.OutputTokens != 6 {
		t.Fatalf("result %+v", r)
	}
}
