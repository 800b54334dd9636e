package kvtier

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"

	"github.com/kvtier/kvtier/gpu"
	"github.com/kvtier/kvtier/messages"
)

// counterValues returns every counter series of fams by name and labels.
func counterValues(fams map[string]*dto.MetricFamily) map[string]float64 {
	out := map[string]float64{}
	for name, f := range fams {
		if f.GetType() != dto.MetricType_COUNTER {
			continue
		}
		for _, mt := range f.GetMetric() {
			key := name
			for _, l := range mt.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			out[key] = mt.GetCounter().GetValue()
		}
	}
	return out
}

// diskTraffic makes the disk tier count: a pushed down to it, then loaded
// back from it.
func diskTraffic(t *testing.T, m *Manager) {
	t.Helper()
	ctx := context.Background()
	a := toks(100, 4*bt)
	pushDown(t, m, a)
	r, err := m.Allocate(ctx, AllocRequest{Seq: 2, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	if out := wait(t, r); out.ValidTokens != len(a) {
		t.Fatalf("outcome %+v, want %d tokens from the disk", out, len(a))
	}
	if err := commitFree(ctx, m, 2); err != nil {
		t.Fatal(err)
	}
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
}

// wantNoCounterDown fails for every counter series of before that is lower
// (or gone) in after: a Prometheus counter never goes down.
func wantNoCounterDown(t *testing.T, what string, before, after map[string]float64) {
	t.Helper()
	for k, v := range before {
		if w, ok := after[k]; ok && w < v {
			t.Errorf("%s: counter %s went down from %v to %v", what, k, v, w)
		}
	}
}

// TestProbeMetricsCountersSurviveDiskRestart: the disk actor failing and
// restarting (the supervisor makes a new DiskActor) must not reset the
// disk tier's counters in the exposition: kvtier_tier_hit_blocks_total and
// the others are counters, and a counter that goes down is read by
// rate() as a reset of the whole process.
func TestProbeMetricsCountersSurviveDiskRestart(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := diskConfig(t, t.TempDir())
	cfg.Registerer = reg
	m := newManager(t, cfg)
	diskTraffic(t, m)
	before := counterValues(scrape(t, reg))
	if before["kvtier_tier_hit_blocks_total,tier=disk"] == 0 {
		t.Fatalf("no disk hits counted: %v", before)
	}
	m.system.Root.Send(m.diskPID, (*messages.LowerWrite)(nil)) // panics: the supervisor restarts the actor
	if err := m.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	st, err := m.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Tier(Disk).Down {
		t.Fatal("the disk actor stopped for good; want it restarted")
	}
	wantNoCounterDown(t, "after a disk actor restart", before, counterValues(scrape(t, reg)))
}

// TestProbeMetricsCountersSurviveDiskDown: with the disk actor stopped
// for good, Stats reports the tier Down with zero counters; the collector
// exports those zeros as the tier's counters.
func TestProbeMetricsCountersSurviveDiskDown(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := diskConfig(t, t.TempDir())
	cfg.Registerer = reg
	m := newManager(t, cfg)
	diskTraffic(t, m)
	before := counterValues(scrape(t, reg))
	if err := m.system.Root.StopFuture(m.diskPID).Wait(); err != nil {
		t.Fatal(err)
	}
	st, err := m.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !st.Tier(Disk).Down {
		t.Fatal("the disk tier is not down")
	}
	wantNoCounterDown(t, "with the disk tier down", before, counterValues(scrape(t, reg)))
}

// remoteRead writes a (2 full blocks) to the shared tier from one node,
// lets drop (nil: none) remove keys in Redis, then reads a on a second
// node with a Registerer, and returns that node's Stats and a scrape.
func remoteRead(t *testing.T, drop func(cl *redis.Client, prefix string)) (Stats, map[string]*dto.MetricFamily) {
	t.Helper()
	ctx := context.Background()
	rc := remoteAddrs(t)["standalone"]
	if rc == nil {
		t.Skip("needs the standalone server ($KVTIER_REDIS)")
	}
	prefix := fmt.Sprintf("kvtier-probe-%d", rand.Uint64())
	a := toks(300, 2*bt+1)
	computeOn(t, newManager(t, nodeConfig(rc, prefix, "m@1")), 1, a)
	if drop != nil {
		cl := redis.NewClient(&redis.Options{Addr: rc.Addrs[0]})
		defer cl.Close()
		drop(cl, prefix)
	}
	reg := prometheus.NewRegistry()
	cfg := nodeConfig(rc, prefix, "m@1")
	cfg.Registerer = reg
	n2 := newManager(t, cfg)
	r, err := n2.Allocate(ctx, AllocRequest{Seq: 1, Tokens: a})
	if err != nil {
		t.Fatal(err)
	}
	if r.Tokens.Of(Remote) != 2*bt {
		t.Fatalf("node 2 sees %d remote tokens, want %d", r.Tokens.Of(Remote), 2*bt)
	}
	wait(t, r)
	if err := n2.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := n2.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return st, scrape(t, reg)
}

// TestProbeMetricsRemoteLoadedBlocks: kvtier_tier_loaded_blocks_total's
// help (and TierStats.Onboarded's doc) says "disk and remote: blocks the
// tier served upwards"; the disk actor counts its hits there, the remote
// actor never counts anything.
func TestProbeMetricsRemoteLoadedBlocks(t *testing.T) {
	st, fams := remoteRead(t, nil)
	hits := st.Tier(Remote).Hits
	if hits != 2 {
		t.Fatalf("remote hits %d, want 2: %+v", hits, st.Tier(Remote))
	}
	if got := value(t, fams, "kvtier_tier_loaded_blocks_total", "tier", "remote"); got != float64(hits) {
		t.Errorf("kvtier_tier_loaded_blocks_total{tier=remote} = %v (Stats Onboarded %d), the remote tier served %d blocks upwards", got, st.Tier(Remote).Onboarded, hits)
	}
	if got := value(t, fams, metricLinkBlocks, "link", "remote_to_host"); got != float64(hits) {
		t.Errorf("kvtier_link_blocks_total{link=remote_to_host} = %v, the remote tier served %d blocks", got, hits)
	}
}

// TestProbeMetricsRemotePartialRead: a Redis pipeline that reads two
// blocks, one of which lost a chunk (Redis evicts keys one by one under
// allkeys-lru), moved one block to the host: kvtier_link_blocks_total and
// _bytes_total{link="remote_to_host"} must count it, as the remote tier's
// hits do. The remote actor reported the batch as not ok (not every item
// was a hit), and the observer then counted nothing moved, and a failed
// transfer for a server that answered every command.
func TestProbeMetricsRemotePartialRead(t *testing.T) {
	st, fams := remoteRead(t, func(cl *redis.Client, prefix string) {
		ctx := context.Background()
		chunks, err := cl.Keys(ctx, prefix+"*:c:*").Result()
		if err != nil || len(chunks) == 0 {
			t.Fatalf("chunk keys under %s: %v, %v", prefix, chunks, err)
		}
		slices.Sort(chunks)
		if err := cl.Del(ctx, chunks[0]).Err(); err != nil { // one chunk of one of the two blocks
			t.Fatal(err)
		}
	})
	hits := st.Tier(Remote).Hits
	if hits != 1 {
		t.Fatalf("remote hits %d, want 1 (one block of two lost a chunk): %+v", hits, st.Tier(Remote))
	}
	if f := fams[metricLinkBlocks]; f == nil || len(f.GetMetric()) == 0 {
		t.Fatalf("no %s series after a block was read from the remote tier", metricLinkBlocks)
	}
	if got := value(t, fams, metricLinkBlocks, "link", "remote_to_host"); got != float64(hits) {
		t.Errorf("kvtier_link_blocks_total{link=remote_to_host} = %v, the remote tier served %d blocks", got, hits)
	}
	if got := value(t, fams, metricLinkBytes, "link", "remote_to_host"); got == 0 {
		t.Errorf("kvtier_link_bytes_total{link=remote_to_host} = 0 after a block was read")
	}
	if fams[metricLinkFailures] != nil {
		t.Errorf("kvtier_link_failed_transfers_total{link=remote_to_host} = %v for a read the server answered in full",
			value(t, fams, metricLinkFailures, "link", "remote_to_host"))
	}
}

// TestProbeMetricsRemoteCorruptIsFailed: a remote block whose chunk was
// overwritten under its record is Corrupt (remote.Store: "a record or chunk
// failed verification"; one evicted is Missing, no failure). kvtier_tier_load_failures_total's help puts a
// corrupt block under reason "failed" and keeps "mismatch" for a digest of
// another prefix; the disk tier and the GPU's outcome (MissFailed) count
// it as failed, the remote tier counted it as a mismatch.
func TestProbeMetricsRemoteCorruptIsFailed(t *testing.T) {
	st, fams := remoteRead(t, func(cl *redis.Client, prefix string) {
		ctx := context.Background()
		chunks, err := cl.Keys(ctx, prefix+"*:c:*").Result()
		if err != nil || len(chunks) == 0 {
			t.Fatalf("chunk keys under %s: %v, %v", prefix, chunks, err)
		}
		slices.Sort(chunks)
		if err := cl.SetRange(ctx, chunks[0], 0, "x").Err(); err != nil {
			t.Fatal(err)
		}
	})
	if got := value(t, fams, "kvtier_tier_load_failures_total", "tier", "remote", "reason", "mismatch"); got != 0 {
		t.Errorf("load failures{tier=remote,reason=mismatch} = %v for a chunk overwritten under its record (Stats %+v)", got, st.Tier(Remote))
	}
	if got := value(t, fams, "kvtier_tier_load_failures_total", "tier", "remote", "reason", "failed"); got != 1 {
		t.Errorf("load failures{tier=remote,reason=failed} = %v, want the corrupt block's 1", got)
	}
}

// errDevice is a device whose streams refuse CopyD2H at enqueue once
// armed (a CUDA enqueue error: cudaMemcpyAsync failing).
type errDevice struct {
	gpu.Device
	arm *atomic.Bool
}

func (d errDevice) NewStream(a gpu.Arena) (gpu.Stream, error) {
	s, err := d.Device.NewStream(a)
	if err != nil {
		return nil, err
	}
	return errStream{s, d.arm}, nil
}

type errStream struct {
	gpu.Stream
	arm *atomic.Bool
}

func (s errStream) CopyD2H(ops []gpu.CopyOp) (*gpu.Event, error) {
	if s.arm.Load() {
		return nil, errors.New("test: the copy's enqueue fails")
	}
	return s.Stream.CopyD2H(ops)
}

// TestProbeMetricsEnqueueFailureIsAFailedTransfer: a copy batch the stream
// refuses at enqueue is a transfer that failed on its link
// (kvtier_link_failed_transfers_total: "Transfers (copy batches, I/Os)
// that failed, by link"); only batches that failed after the enqueue were
// counted.
func TestProbeMetricsEnqueueFailureIsAFailedTransfer(t *testing.T) {
	ctx := context.Background()
	inner, err := gpu.NewHost(gpu.HostConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer inner.Close()
	arm := new(atomic.Bool)
	reg := prometheus.NewRegistry()
	m := newManager(t, Config{GPUBlocks: 8, BlockTokens: bt, PinnedBytes: 1 << 20, Ingestion: IngestAll,
		Device: errDevice{inner, arm}, Registerer: reg})
	r, err := m.Allocate(ctx, AllocRequest{Seq: 1, Tokens: toks(7, 2*bt)})
	if err != nil {
		t.Fatal(err)
	}
	wait(t, r)
	arm.Store(true)
	if err := m.Commit(ctx, 1, AllTokens); err != nil { // written through to pinned memory: the copy is refused
		t.Fatal(err)
	}
	if err := m.Flush(ctx); err != nil {
		t.Logf("flush: %v", err)
	}
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, reg)
	if fams[metricLinkFailures] == nil {
		t.Fatalf("no %s series after a gpu_to_host copy batch failed at enqueue (GPU stats: %v)", metricLinkFailures, st.Tier(GPU))
	}
	if got := value(t, fams, metricLinkFailures, "link", "gpu_to_host"); got != 1 {
		t.Errorf("%s{link=gpu_to_host} = %v, want 1", metricLinkFailures, got)
	}
	if got := counterValues(fams)[metricLinkBlocks+",link=gpu_to_host"]; got != 0 {
		t.Errorf("%s{link=gpu_to_host} = %v: the refused batch moved nothing", metricLinkBlocks, got)
	}
}

// TestProbeMetricsRemoteWriteOfStoredBlocks: node 2 computes a prefix node
// 1 already stored in the shared tier; its Put finds every block there
// (EXISTS) and sends nothing (remote.Store.Put: "left as it is and
// reported stored"). kvtier_link_bytes_total{link="host_to_remote"} is
// "what moved over each link": nothing did.
func TestProbeMetricsRemoteWriteOfStoredBlocks(t *testing.T) {
	ctx := context.Background()
	rc := remoteAddrs(t)["standalone"]
	if rc == nil {
		t.Skip("needs the standalone server ($KVTIER_REDIS)")
	}
	prefix := fmt.Sprintf("kvtier-probe-%d", rand.Uint64())
	a := toks(300, 2*bt)
	computeOn(t, newManager(t, nodeConfig(rc, prefix, "m@1")), 1, a)
	reg := prometheus.NewRegistry()
	cfg := nodeConfig(rc, prefix, "m@1")
	cfg.Registerer = reg
	n2 := newManager(t, cfg)
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
	fams := scrape(t, reg)
	if f := fams[metricLinkBytes]; f != nil {
		for _, mt := range f.GetMetric() {
			for _, l := range mt.GetLabel() {
				if l.GetName() == "link" && l.GetValue() == "host_to_remote" && mt.GetCounter().GetValue() != 0 {
					t.Errorf("kvtier_link_bytes_total{link=host_to_remote} = %v, remote written %d: blocks the server held already counted as moved",
						mt.GetCounter().GetValue(), st.Tier(Remote).Offloaded)
				}
			}
		}
	}
}
