package schedcache

import (
	"context"
	"testing"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/scheduler"
)

// TestProbeLateLoadLoadedIsZero: through the adaptor, a load past the
// Manager's read deadline closes Ready with Loaded 0 (everything below is
// recomputed), and the scheduler's commit of the recomputed prompt is
// accepted at once, the late copy still on the stream.
func TestProbeLateLoadLoadedIsZero(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	dev, err := gpu.NewHost(gpu.HostConfig{Fault: func(dir gpu.Direction, ops []gpu.CopyOp) error {
		if dir == gpu.H2D {
			<-release
		}
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	m, err := kvtier.New(kvtier.Config{BlockTokens: blockTokens, GPUBlocks: 4, PinnedBytes: pinnedBytes(t, 16, blockTokens),
		Device: dev, ReadDeadlineBase: time.Millisecond, ReadDeadlinePerToken: time.Microsecond})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(ctx)
	c := New(m, Options{})
	p := seqTokens(100, 8) // two full blocks: the first may hit, the last is recomputed (keepOne)
	if o := allocOne(t, c, 1, p); o.Err != nil {
		t.Fatal(o.Err)
	}
	if err := c.Swap(ctx, []scheduler.SeqID{1}); err != nil {
		t.Fatal(err)
	}
	c.Flush(ctx)
	if o := allocOne(t, c, 2, seqTokens(900, 16)); o.Err != nil { // p leaves the GPU
		t.Fatal(o.Err)
	}
	if err := c.Free(ctx, []scheduler.SeqID{2}); err != nil {
		t.Fatal(err)
	}
	c.Flush(ctx)
	outs, err := c.Allocate(ctx, []scheduler.AllocReq{{Seq: 3, Tokens: p}})
	if err != nil || outs[0].Err != nil {
		t.Fatal(err, outs)
	}
	o := outs[0]
	if o.PinnedTokens != 4 || o.Ready == nil || o.Loaded == nil {
		t.Fatalf("outcome %+v, want 4 tokens loading from pinned memory (the last block kept to compute)", o)
	}
	select {
	case <-o.Ready:
	case <-time.After(10 * time.Second):
		t.Fatal("Ready never closed")
	}
	if n := o.Loaded(); n != 0 {
		t.Errorf("Loaded %d after a late load, want 0", n)
	}
	errs, err := c.Commit(ctx, []scheduler.SeqID{3}, []int{len(p)})
	if err != nil || errs[0] != nil {
		t.Errorf("commit after the late load: %v %v", err, errs)
	}
	close(release)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st, _ := m.Stats(ctx)
	if g := st.Tier(kvtier.GPU); g.Timeouts != 1 {
		t.Errorf("timeouts %d, want 1", g.Timeouts)
	}
}
