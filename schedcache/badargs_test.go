package schedcache

import (
	"context"
	"errors"
	"testing"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/scheduler"
)

// TestBadArgs: Append and Commit with lengths that do not match are
// refused with ErrBadArgs and change nothing: no token is appended, no
// block committed (a later allocation of the same prompt hits none of it).
func TestBadArgs(t *testing.T) {
	ctx := context.Background()
	c := New(newManager(t, kvtier.Config{GPUBlocks: 8}), Options{Sync: true})
	prompt := seqTokens(100, 6) // one full block and two tokens
	outs, err := c.Allocate(ctx, []scheduler.AllocReq{{Seq: 1, Tokens: prompt}})
	if err != nil || outs[0].Err != nil {
		t.Fatal(err, outs)
	}
	if _, err := c.Commit(ctx, []scheduler.SeqID{1}, []int{4, 6}); !errors.Is(err, ErrBadArgs) {
		t.Fatalf("commit with 2 counts for 1 sequence: %v, want ErrBadArgs", err)
	}
	if _, err := c.Append(ctx, []scheduler.SeqID{1, 1}, []int64{9}); !errors.Is(err, ErrBadArgs) {
		t.Fatalf("append with 1 token for 2 sequences: %v, want ErrBadArgs", err)
	}
	if _, err := c.Append(ctx, []scheduler.SeqID{1}, nil); !errors.Is(err, ErrBadArgs) {
		t.Fatalf("append with no token for 1 sequence: %v, want ErrBadArgs", err)
	}
	// Nothing committed: the same prompt hits nothing.
	if outs, err := c.Allocate(ctx, []scheduler.AllocReq{{Seq: 2, Tokens: prompt}}); err != nil || outs[0].Err != nil || outs[0].GPUTokens != 0 {
		t.Fatalf("after the refused commit: %+v %v, want no hit", outs, err)
	}
	// Nothing appended: seq 1 holds its 6 prompt tokens, no seventh.
	if errs, err := c.Commit(ctx, []scheduler.SeqID{1}, []int{7}); err != nil || len(errs) != 1 || errs[0] == nil {
		t.Fatalf("commit of 7 tokens of a 6-token sequence: %v %v, want a per-sequence error", errs, err)
	}
	if errs, err := c.Commit(ctx, []scheduler.SeqID{1}, []int{6}); err != nil || errs[0] != nil {
		t.Fatalf("commit of the 6 prompt tokens: %v %v", errs, err)
	}
	if outs, err := c.Allocate(ctx, []scheduler.AllocReq{{Seq: 3, Tokens: prompt}}); err != nil || outs[0].GPUTokens != 4 {
		t.Fatalf("after the commit: %+v %v, want the full block hit", outs, err)
	}
}
