package kvtier

import (
	"context"
	"testing"
)

// TestMaxHitTokensKeepsATokenToCompute: the documented way to keep one
// prompt token to compute when the whole prompt is cached (vLLM's cap):
// MaxHitTokens = len(prompt)-1 serves all blocks but the last.
func TestMaxHitTokensKeepsATokenToCompute(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, Config{GPUBlocks: 8})
	prompt := toks(0, 3*bt)
	if _, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: prompt}); err != nil {
		t.Fatal(err)
	}
	if err := m.Commit(ctx, 1, AllTokens); err != nil {
		t.Fatal(err)
	}
	if err := m.Free(ctx, 1); err != nil {
		t.Fatal(err)
	}
	full, err := m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: prompt})
	if err != nil {
		t.Fatal(err)
	}
	<-full.Ready.Done()
	if v := full.Ready.Outcome().ValidTokens; v != len(prompt) {
		t.Fatalf("uncapped: ValidTokens %d, want the whole prompt %d", v, len(prompt))
	}
	capped, err := m.Allocate(ctx, AllocRequest{Seq: 3, Tokens: prompt, MaxHitTokens: len(prompt) - 1})
	if err != nil {
		t.Fatal(err)
	}
	<-capped.Ready.Done()
	if v := capped.Ready.Outcome().ValidTokens; v != len(prompt)-bt {
		t.Fatalf("MaxHitTokens len-1: ValidTokens %d, want %d (all blocks but the last)", v, len(prompt)-bt)
	}
}
