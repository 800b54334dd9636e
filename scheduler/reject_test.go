package scheduler

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/kvtier/kvtier/trace"
)

// oversizeTrace is nine 8-token requests, one every 10 ms, with a 100-token
// one (sequence 3) among them: 4 blocks of 4 tokens hold 16 tokens, so it
// can never fit, and every other one can.
func oversizeTrace() []trace.Request {
	var reqs []trace.Request
	for i := range 10 {
		in := 8
		if i == 2 {
			in = 100
		}
		reqs = append(reqs, req(int64(10*i), in, 2, int64(100*i)))
	}
	return reqs
}

// rejections runs s to the end and returns the sequences each step
// rejected, by step index.
func rejections(t *testing.T, s *Scheduler) map[int][]SeqID {
	t.Helper()
	out := map[int][]SeqID{}
	for i, rep := range steps(t, s) {
		if len(rep.Rejected) > 0 {
			out[i] = rep.Rejected
		}
	}
	return out
}

// TestRejectNeverFits: a request that can never fit in the GPU cache is
// rejected and the others are served; the run ends normally. It used to end
// the run with ErrUnschedulable.
func TestRejectNeverFits(t *testing.T) {
	for _, tc := range []struct {
		name string
		max  int
	}{
		{"at admission", 0},   // nothing else holds blocks and it gets none
		{"on arrival", 4 * 4}, // Config.MaxSeqTokens
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeCache(fakeConfig{gpuBlocks: 4, blockSize: 4})
			s := mustNew(t, f, oversizeTrace(), Config{CostModel: simpleCost(), MaxSeqTokens: tc.max})
			rej := rejections(t, s)
			var all []SeqID
			for _, ids := range rej {
				all = append(all, ids...)
			}
			if !slices.Equal(all, []SeqID{3}) {
				t.Fatalf("rejected %v, want [3]", rej)
			}
			r := s.Result()
			if r.Requests != 9 || r.Rejected != 1 || r.RejectedPromptTokens != 100 || r.PromptTokens != 9*8 || r.OutputTokens != 9*2 {
				t.Fatalf("served %d requests (%d prompt, %d output tokens), rejected %d (%d prompt tokens); want 9 (72, 18) and 1 (100)",
					r.Requests, r.PromptTokens, r.OutputTokens, r.Rejected, r.RejectedPromptTokens)
			}
			if first := r.FirstAdmissions().Tokens; first != 9*8 {
				t.Fatalf("first admissions presented %d tokens, want the served requests' 72", first)
			}
		})
	}
}

// TestRejectOnArrivalDoesNotWait: with MaxSeqTokens the request is rejected
// in the step it arrives in, while sequences ahead of it still run, instead
// of holding the queue until the GPU drains.
func TestRejectOnArrivalDoesNotWait(t *testing.T) {
	reqs := []trace.Request{req(0, 8, 50, 0), req(0, 100, 1, 100), req(0, 8, 1, 200)}
	f := newFakeCache(fakeConfig{gpuBlocks: 20, blockSize: 4})
	s := mustNew(t, f, reqs, Config{CostModel: simpleCost(), MaxSeqTokens: 80})
	rep, err := s.Step(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(rep.Rejected, []SeqID{2}) || !slices.Equal(rep.Admitted, []SeqID{1, 3}) {
		t.Fatalf("first step rejected %v and admitted %v, want [2] and [1 3]", rep.Rejected, rep.Admitted)
	}
	steps(t, s)
	if r := s.Result(); r.Requests != 2 || r.Rejected != 1 {
		t.Fatalf("served %d, rejected %d; want 2 and 1", r.Requests, r.Rejected)
	}
}

// TestRejectOutputPastCapacity: a prompt that fits but whose output does
// not is rejected on arrival with MaxSeqTokens (14 + 9 tokens > 16), and
// without it once it has preempted itself and cannot be admitted again.
func TestRejectOutputPastCapacity(t *testing.T) {
	for _, max := range []int{0, 16} {
		f := newFakeCache(fakeConfig{gpuBlocks: 4, blockSize: 4})
		reqs := []trace.Request{req(0, 14, 10, 0), req(5, 8, 2, 100)}
		res, err := Run(context.Background(), f, reqs, Config{CostModel: simpleCost(), MaxSeqTokens: max})
		if err != nil {
			t.Fatalf("MaxSeqTokens %d: %v", max, err)
		}
		if res.Requests != 1 || res.Rejected != 1 || res.PromptTokens != 8 {
			t.Fatalf("MaxSeqTokens %d: served %d (%d prompt tokens), rejected %d; want 1 (8), 1", max, res.Requests, res.PromptTokens, res.Rejected)
		}
	}
	// 14 + 3 tokens, the last sampled with no block: 16 fit.
	f := newFakeCache(fakeConfig{gpuBlocks: 4, blockSize: 4})
	res, err := Run(context.Background(), f, []trace.Request{req(0, 14, 3, 0)}, Config{CostModel: simpleCost(), MaxSeqTokens: 16})
	if err != nil || res.Requests != 1 || res.Rejected != 0 {
		t.Fatalf("14 + 3 tokens in 16: served %d, rejected %d, %v; want 1, 0", res.Requests, res.Rejected, err)
	}
}

// TestRejectLast: a run whose last requests are all rejected ends (no
// ErrStalled with nothing left to do).
func TestRejectLast(t *testing.T) {
	for _, max := range []int{0, 16} {
		f := newFakeCache(fakeConfig{gpuBlocks: 4, blockSize: 4})
		reqs := []trace.Request{req(0, 8, 1, 0), req(1000, 100, 1, 100), req(1000, 200, 1, 200)}
		res, err := Run(context.Background(), f, reqs, Config{CostModel: simpleCost(), MaxSeqTokens: max})
		if err != nil || res.Requests != 1 || res.Rejected != 2 || res.RejectedPromptTokens != 300 {
			t.Fatalf("MaxSeqTokens %d: served %d, rejected %d (%d tokens), %v; want 1, 2 (300)", max, res.Requests, res.Rejected, res.RejectedPromptTokens, err)
		}
		f = newFakeCache(fakeConfig{gpuBlocks: 4, blockSize: 4})
		res, err = Run(context.Background(), f, []trace.Request{req(0, 100, 1, 0)}, Config{MaxSeqTokens: max})
		if err != nil || res.Requests != 0 || res.Rejected != 1 {
			t.Fatalf("MaxSeqTokens %d, one oversize request: served %d, rejected %d, %v; want 0, 1", max, res.Requests, res.Rejected, err)
		}
	}
}

func TestMaxSeqTokensNegative(t *testing.T) {
	if _, err := New(newFakeCache(fakeConfig{gpuBlocks: 4, blockSize: 4}), nil, Config{MaxSeqTokens: -1}); err == nil {
		t.Fatal("MaxSeqTokens -1 accepted")
	}
}

// TestConfigRejects: Config.Rejects says in advance which requests a run
// rejects on arrival.
func TestConfigRejects(t *testing.T) {
	c := Config{MaxSeqTokens: 16}
	for _, tc := range []struct {
		in, out, maxOut int
		want            bool
	}{
		{14, 3, 0, false}, {14, 4, 0, true}, {17, 0, 0, true}, {16, 0, 0, false},
		{14, 100, 3, false}, {14, 100, 4, true},
	} {
		c.MaxOutputTokens = tc.maxOut
		if got := c.Rejects(req(0, tc.in, tc.out, 0)); got != tc.want {
			t.Errorf("%d + %d tokens (max output %d) in 16: Rejects %v, want %v", tc.in, tc.out, tc.maxOut, got, tc.want)
		}
	}
	if (Config{}).Rejects(req(0, 1<<20, 1, 0)) {
		t.Error("MaxSeqTokens 0 rejects")
	}
}

// TestRejectAfterPreemptionDropsTTFT: a request whose prompt fits but whose
// output does not (MaxSeqTokens 0) samples its first token, preempts itself
// and is rejected; Result.TTFT is over the served requests only, so it must
// not keep the rejected one's time to first token.
func TestRejectAfterPreemptionDropsTTFT(t *testing.T) {
	f := newFakeCache(fakeConfig{gpuBlocks: 4, blockSize: 4})
	reqs := []trace.Request{req(0, 14, 10, 0), req(1000, 8, 1, 100)}
	res, err := Run(context.Background(), f, reqs, Config{CostModel: simpleCost()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Requests != 1 || res.Rejected != 1 {
		t.Fatalf("served %d, rejected %d; want 1, 1", res.Requests, res.Rejected)
	}
	// One served request: every percentile is its TTFT.
	if tt := res.TTFT; tt.P50 != tt.Max || tt.Mean != tt.Max {
		t.Fatalf("TTFT %+v over one served request: percentiles differ, the rejected request's TTFT is in it", tt)
	}
}

// flushHeldCache holds the blocks a Free releases until the next Flush, as
// a cache does whose tier writes of them are still in flight (schedcache
// with Sync false): Allocate answers ErrNoBlocks meanwhile.
type flushHeldCache struct {
	*fakeCache
	held    bool
	flushes int
}

func (c *flushHeldCache) Allocate(ctx context.Context, reqs []AllocReq) ([]AllocOutcome, error) {
	if !c.held {
		return c.fakeCache.Allocate(ctx, reqs)
	}
	outs := make([]AllocOutcome, len(reqs))
	for i := range outs {
		outs[i].Err = fmt.Errorf("held: %w", ErrNoBlocks)
	}
	return outs, nil
}

func (c *flushHeldCache) Free(ctx context.Context, seqs []SeqID) error {
	c.held = true
	return c.fakeCache.Free(ctx, seqs)
}

func (c *flushHeldCache) Flush(ctx context.Context) error {
	c.held = false
	c.flushes++
	return c.fakeCache.Flush(ctx)
}

// TestNoRejectWhileWritesInFlight: a request that fits, arriving when no
// sequence runs but the cache still holds blocks for writes in flight, is
// not rejected: nothing holds blocks only once the cache has flushed. The
// demo with -sync=false rejected most of a trace whose requests all fit.
func TestNoRejectWhileWritesInFlight(t *testing.T) {
	for _, max := range []int{0, 16} {
		c := &flushHeldCache{fakeCache: newFakeCache(fakeConfig{gpuBlocks: 4, blockSize: 4})}
		reqs := []trace.Request{req(0, 8, 1, 0), req(1000, 8, 1, 100), req(2000, 100, 1, 200)}
		res, err := Run(context.Background(), c, reqs, Config{CostModel: simpleCost(), MaxSeqTokens: max})
		if err != nil {
			t.Fatalf("MaxSeqTokens %d: %v", max, err)
		}
		want := 1 // the 100-token request never fits
		if res.Requests != 2 || res.Rejected != want {
			t.Fatalf("MaxSeqTokens %d: served %d, rejected %d; want 2, %d", max, res.Requests, res.Rejected, want)
		}
	}
}

// TestRejectLastProgress: when the last requests are rejected, the last
// Progress still says every request is finished or rejected, as it does
// when the last one finishes (a progress bar ends full).
func TestRejectLastProgress(t *testing.T) {
	for _, max := range []int{0, 16} {
		var last Progress
		f := newFakeCache(fakeConfig{gpuBlocks: 4, blockSize: 4})
		reqs := []trace.Request{req(0, 8, 1, 0), req(1000, 100, 1, 100)}
		cfg := Config{CostModel: simpleCost(), MaxSeqTokens: max, Progress: func(p Progress) { last = p }}
		if _, err := Run(context.Background(), f, reqs, cfg); err != nil {
			t.Fatal(err)
		}
		if last.Finished != 2 || last.Total != 2 {
			t.Errorf("MaxSeqTokens %d: last progress %d/%d, want 2/2", max, last.Finished, last.Total)
		}
	}
}
