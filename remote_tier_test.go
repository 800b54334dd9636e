package kvtier

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// remoteAddrs returns the Redis servers of .ci/redis.sh, or skips.
func remoteAddrs(t *testing.T) map[string]*RemoteConfig {
	t.Helper()
	out := map[string]*RemoteConfig{}
	if a := os.Getenv("KVTIER_REDIS"); a != "" {
		out["standalone"] = &RemoteConfig{Addrs: []string{a}}
	}
	if a := os.Getenv("KVTIER_REDIS_CLUSTER"); a != "" {
		out["cluster"] = &RemoteConfig{Addrs: strings.Split(a, ","), Cluster: true}
	}
	if len(out) == 0 && os.Getenv("KVTIER_REQUIRE_REDIS") != "" {
		t.Fatal("KVTIER_REQUIRE_REDIS is set (CI) but no Redis address is")
	}
	if len(out) == 0 {
		t.Skip(`no Redis: run eval "$(.ci/redis.sh start)" first (CI does)`)
	}
	return out
}

// nodeConfig is one node: small GPU and pinned tiers writing everything
// through to the shared tier.
func nodeConfig(rc *RemoteConfig, prefix, model string) Config {
	r := *rc
	r.Prefix = prefix
	return Config{GPUBlocks: 16, BlockTokens: bt, ModelID: model, PinnedBytes: 16 * 4096, Remote: &r,
		Ingestion: IngestAll, DiskIngestion: IngestAll}
}

// computeOn commits a prompt's blocks on a node and flushes them down.
func computeOn(t *testing.T, m *Manager, seq uint64, a []int64) {
	t.Helper()
	ctx := context.Background()
	r, err := m.Allocate(ctx, AllocRequest{Seq: seq, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	writeBlocks(t, m, r.Blocks, a, "")
	if err := commitFree(ctx, m, seq); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRemoteSharedAcrossNodes: a block computed and committed on one node
// is served, byte-exact, from the shared tier on another; another model id
// or tenant on the second node gets nothing.
func TestRemoteSharedAcrossNodes(t *testing.T) {
	ctx := context.Background()
	for name, rc := range remoteAddrs(t) {
		t.Run(name, func(t *testing.T) {
			prefix := fmt.Sprintf("kvtier-test-%d", rand.Uint64())
			a := toks(300, 4*bt+1)
			n1 := newManager(t, nodeConfig(rc, prefix, "m@1"))
			computeOn(t, n1, 1, a)
			if st, _ := n1.Stats(ctx); st.Tier(Remote).Offloaded < 4 {
				t.Fatalf("node 1 wrote %d blocks to the shared tier, want 4: %+v", st.Tier(Remote).Offloaded, st.Tier(Remote))
			}
			n2 := newManager(t, nodeConfig(rc, prefix, "m@1"))
			r, err := n2.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
			if err != nil {
				t.Fatal(err)
			}
			if r.Tokens.Of(Remote) != 4*bt {
				t.Fatalf("node 2 sees %d tokens in the shared tier, want %d", r.Tokens.Of(Remote), 4*bt)
			}
			if out := wait(t, r); out.ValidTokens != 4*bt {
				t.Fatalf("node 2 loaded %+v", out)
			}
			checkBlocks(t, n2, r.Blocks, a, "", 4)
			if err := n2.Free(ctx, 1); err != nil {
				t.Fatal(err)
			}
			for _, c := range []struct {
				model, salt string
			}{{"m-finetune@1", ""}, {"m@1", "other-tenant"}} {
				n3 := newManager(t, nodeConfig(rc, prefix, c.model))
				r, err := n3.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a, Salt: c.salt})
				if err != nil {
					t.Fatal(err)
				}
				if out := wait(t, r); r.Tokens.Of(Remote) != 0 || out.ValidTokens != 0 {
					t.Fatalf("model %q tenant %q sees %d remote tokens, %+v", c.model, c.salt, r.Tokens.Of(Remote), out)
				}
			}
			if n, err := n2.Delete(ctx, a, ""); err != nil || n == 0 {
				t.Fatalf("Delete = %d, %v", n, err)
			}
			n4 := newManager(t, nodeConfig(rc, prefix, "m@1"))
			if r, err := n4.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a}); err != nil || r.Tokens.Of(Remote) != 0 {
				t.Fatalf("after Delete a fresh node sees %d remote tokens (%v)", r.Tokens.Of(Remote), err)
			}
		})
	}
}

// TestRemoteTwoProcesses: the writer is another OS process.
func TestRemoteTwoProcesses(t *testing.T) {
	rc := remoteAddrs(t)["standalone"]
	if rc == nil {
		t.Skip("needs the standalone server ($KVTIER_REDIS)")
	}
	a := toks(700, 3*bt)
	if prefix := os.Getenv("KVTIER_REMOTE_CHILD"); prefix != "" { // the writer
		m := newManager(t, nodeConfig(rc, prefix, "m@1"))
		computeOn(t, m, 1, a)
		return
	}
	prefix := fmt.Sprintf("kvtier-test-%d", rand.Uint64())
	cmd := exec.Command(os.Args[0], "-test.run=^TestRemoteTwoProcesses$", "-test.count=1")
	cmd.Env = append(os.Environ(), "KVTIER_REMOTE_CHILD="+prefix)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the writer process: %v\n%s", err, out)
	}
	ctx := context.Background()
	m := newManager(t, nodeConfig(rc, prefix, "m@1"))
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	if out := wait(t, r); r.Tokens.Of(Remote) != 3*bt || out.ValidTokens != 3*bt {
		t.Fatalf("the reader process: %d remote tokens, %+v", r.Tokens.Of(Remote), out)
	}
	checkBlocks(t, m, r.Blocks, a, "", 3)
}
