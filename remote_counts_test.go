package kvtier

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// failOneChunk is a Redis hook that fails the first chunk SET it sees (as
// a server out of memory answers it), so that one block of a write batch
// fails and the others land.
type failOneChunk struct{ done atomic.Bool }

func (f *failOneChunk) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (f *failOneChunk) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (f *failOneChunk) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			if c.Name() == "set" && strings.Contains(fmt.Sprint(c.Args()[1]), ":c:") && f.done.CompareAndSwap(false, true) {
				c.SetErr(errors.New("OOM command not allowed (test)"))
			}
		}
		return err
	}
}

// remoteNode is a node writing through to the shared tier with its own
// registry.
func remoteNode(t *testing.T, rc *RemoteConfig, prefix string) (*Manager, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := nodeConfig(rc, prefix, "m@1")
	cfg.Registerer = reg
	return newManager(t, cfg), reg
}

// TestRemotePartlyFailedWriteCountsPerBlock: a write batch one block of
// which fails on the server still moved the other over the link. The
// remote tier counts per block (Stats Offloaded 1, Failed 1) and
// kvtier_link_blocks_total and _bytes_total count the block that moved,
// beside the one failed transfer (kvtier_link_failed_transfers_total: a
// Redis pipeline) — the observer counted nothing moved for a transfer
// that failed in part.
func TestRemotePartlyFailedWriteCountsPerBlock(t *testing.T) {
	rc := remoteAddrs(t)["standalone"]
	if rc == nil {
		t.Skip("needs the standalone server ($KVTIER_REDIS)")
	}
	m, reg := remoteNode(t, rc, fmt.Sprintf("kvtier-test-%d", rand.Uint64()))
	m.remote.AddHook(&failOneChunk{}) // before any call: nothing is in flight
	computeOn(t, m, 1, toks(500, 2*bt))
	st, err := m.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rs := st.Tier(Remote); rs.Offloaded != 1 || rs.Failed != 1 {
		t.Fatalf("remote Offloaded %d Failed %d, want 1 and 1 (one block of two failed)", rs.Offloaded, rs.Failed)
	}
	fams := scrape(t, reg)
	link := "host_to_remote"
	if got := value(t, fams, metricLinkFailures, "link", link); got != 1 {
		t.Errorf("%s{link=%s} = %v, want the 1 pipeline that failed in part", metricLinkFailures, link, got)
	}
	if got := value(t, fams, metricLinkBlocks, "link", link); got != 1 {
		t.Errorf("%s{link=%s} = %v, want the 1 block that moved", metricLinkBlocks, link, got)
	}
	if got := value(t, fams, metricLinkBytes, "link", link); got == 0 {
		t.Errorf("%s{link=%s} = 0, a block moved", metricLinkBytes, link)
	}
}

// TestRemoteWrittenCountsBlocksSent: node 2 writes a prompt whose first
// two blocks node 1 stored already; its Put sends only the third
// (remote.Store.PutSent). The remote tier's written counter (Stats
// Offloaded, kvtier_tier_written_blocks_total) counts blocks this node
// sent, as kvtier_link_blocks_total does, not those a peer had stored.
func TestRemoteWrittenCountsBlocksSent(t *testing.T) {
	rc := remoteAddrs(t)["standalone"]
	if rc == nil {
		t.Skip("needs the standalone server ($KVTIER_REDIS)")
	}
	prefix := fmt.Sprintf("kvtier-test-%d", rand.Uint64())
	n1, _ := remoteNode(t, rc, prefix)
	computeOn(t, n1, 1, toks(600, 2*bt))
	n2, reg := remoteNode(t, rc, prefix)
	ctx := context.Background()
	a := toks(600, 3*bt)
	r, err := n2.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a, MaxHitTokens: -1}) // computed again
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	writeBlocks(t, n2, r.Blocks, a, "")
	if err := commitFree(ctx, n2, 1); err != nil {
		t.Fatal(err)
	}
	if err := n2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := n2.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Tier(Remote).Offloaded; got != 1 {
		t.Errorf("remote Offloaded %d, want 1: two of the three blocks were stored by node 1", got)
	}
	fams := scrape(t, reg)
	if got := value(t, fams, "kvtier_tier_written_blocks_total", "tier", "remote"); got != 1 {
		t.Errorf("kvtier_tier_written_blocks_total{tier=remote} = %v, want 1", got)
	}
	if got := value(t, fams, metricLinkBlocks, "link", "host_to_remote"); got != 1 {
		t.Errorf("%s{link=host_to_remote} = %v, want 1", metricLinkBlocks, got)
	}
}
