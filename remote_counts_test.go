package kvtier

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// remoteNode is a node writing through to the shared tier with its own
// registry.
func remoteNode(t *testing.T, rc *RemoteConfig, prefix string) (*Manager, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := nodeConfig(rc, prefix, "m@1")
	cfg.Registerer = reg
	return newManager(t, cfg), reg
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
