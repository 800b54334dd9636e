package kvtier

import (
	"context"
	"testing"
	"time"

	"github.com/kvtier/kvtier/gpu"
)

// TestCommitTypedNilFence: a commit whose After is a nil *gpu.HostFence is
// a commit with no fence. It used to crash the GPU actor's copy path, after
// which Flush timed out and Close waited for ever.
func TestCommitTypedNilFence(t *testing.T) {
	ctx := context.Background()
	m, err := New(Config{GPUBlocks: 8, BlockTokens: bt, PinnedBytes: 1 << 20, Ingestion: IngestAll, ReadDeadlineBase: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { // bounded: the old failure made Close(Background) hang
		c, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		_ = m.Close(c)
	}()
	a := toks(7, 2*bt)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	var f *gpu.HostFence
	errs, err := m.CommitBatch(ctx, []CommitItem{{Seq: 1, Tokens: AllTokens, After: f}})
	if err != nil || errs[0] != nil {
		t.Fatalf("commit: %v %v", err, errs)
	}
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := m.Flush(short); err != nil {
		t.Fatalf("Flush after a commit with a nil *HostFence: %v", err)
	}
	if p, _ := m.Exists(ctx, a, ""); p.Tokens.Of(Pinned) != 2*bt {
		t.Fatalf("pinned holds %d tokens, want %d", p.Tokens.Of(Pinned), 2*bt)
	}
}
