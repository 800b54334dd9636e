package scheduler

import (
	"context"
	"testing"

	"github.com/kvtier/kvtier/trace"
)

// TestWaitingPromptsBuiltAtAdmission: a request's prompt tokens are built
// when admission first considers it, not when it arrives, so a burst of
// arrivals waiting behind a full batch holds no prompt. They were built on
// arrival: a trace of 50,000 requests of 15k tokens, all at time 0, held
// 6 GB of waiting prompts in the demo. The run is the same either way.
func TestWaitingPromptsBuiltAtAdmission(t *testing.T) {
	var reqs []trace.Request
	for i := range 400 {
		reqs = append(reqs, req(0, 1024, 2, int64(i%5)*2))
	}
	cfg := Config{CostModel: simpleCost(), MaxNumSeqs: 4}
	s := mustNew(t, newFakeCache(fakeConfig{gpuBlocks: 64, blockSize: 16}), reqs, cfg)
	if _, err := s.Step(context.Background()); err != nil {
		t.Fatal(err)
	}
	built := 0
	for _, q := range s.seqs {
		if q.phase == phaseWaiting && q.tokens != nil {
			built++
		}
	}
	if waiting := len(s.Waiting()); waiting < 390 || built > cfg.MaxNumSeqs {
		t.Fatalf("%d waiting, %d of them with their prompt built; want nearly all waiting, at most %d built", waiting, built, cfg.MaxNumSeqs)
	}
	rest := steps(t, s)
	again := mustNew(t, newFakeCache(fakeConfig{gpuBlocks: 64, blockSize: 16}), reqs, cfg)
	all := steps(t, again)
	if len(all) != len(rest)+1 || s.Result().Requests != again.Result().Requests || s.Result().PrefillTokens != again.Result().PrefillTokens {
		t.Fatalf("runs differ: %d+1 steps, %+v; %d steps, %+v", len(rest), s.Result(), len(all), again.Result())
	}
}
