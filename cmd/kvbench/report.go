package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
)

// Report is everything one run measured: the JSON object -json prints. A suite
// that did not run is absent (null).
type Report struct {
	Machine Machine       `json:"machine"`
	Mode    string        `json:"mode"`   // "full" or "quick"
	Suites  []string      `json:"suites"` // the suites that ran, in order
	Alloc   *AllocResult  `json:"alloc,omitempty"`
	Copy    *CopyResult   `json:"copy,omitempty"`
	Trace   *TraceResult  `json:"trace,omitempty"`
	Replay  *ReplayResult `json:"replay,omitempty"`
	Remote  *RemoteResult `json:"remote,omitempty"`
	Targets []Target      `json:"targets"`
}

// Target is one goal of issue 7 and where this run stands: Value compared with
// Limit by Cmp. Status is PASS, MISS, or N/A when the measurement is missing.
// JSON holds no Inf or NaN: Value is null when the value is not a finite
// number, with Infinite true when it is +Inf (a ratio over a zero that is
// compared as infinite) and false when it is undefined (0/0, status N/A).
type Target struct {
	Name     string   `json:"name"`
	Value    *float64 `json:"value"`
	Infinite bool     `json:"infinite,omitempty"`
	Cmp      string   `json:"cmp"` // "<=" or ">="
	Limit    float64  `json:"limit"`
	Status   string   `json:"status"`
}

// newTarget judges value against limit; a NaN value is not measured.
func newTarget(name string, value float64, cmp string, limit float64, measured bool) Target {
	t := Target{Name: name, Cmp: cmp, Limit: limit, Status: "N/A"}
	switch {
	case math.IsInf(value, 1):
		t.Infinite = true
	case math.IsNaN(value) || math.IsInf(value, -1):
		measured = false
	default:
		t.Value = &value
	}
	if measured {
		ok := value <= limit
		if cmp == ">=" {
			ok = value >= limit
		}
		t.Status = "MISS"
		if ok {
			t.Status = "PASS"
		}
	}
	return t
}

// targets derives the targets the report's suites can judge.
func targets(r *Report) []Target {
	var ts []Target
	if a := r.Alloc; a != nil {
		ts = append(ts,
			newTarget("actor_over_direct_cost", a.ActorOverDirectCost, "<=", 1.3, a.ActorBuilt),
			newTarget(fmt.Sprintf("actor_over_direct_cost@%dtok", a.LongBlockTokens), a.LongActorOverDirectCost, "<=", 1.3, a.ActorBuilt && a.LongBlockTokens > 0),
			newTarget("ns_per_block_1m/ns_per_block_1k", a.NsPerBlock1m/a.NsPerBlock1k, "<=", 1.5, true))
	}
	if c := r.Copy; c != nil {
		ts = append(ts,
			newTarget("d2h_gbps/memmove_gbps", c.D2HGBps/c.MemmoveGBps, ">=", 0.9, true),
			newTarget("h2d_gbps/memmove_gbps", c.H2DGBps/c.MemmoveGBps, ">=", 0.9, true))
		if d := c.Disk; d != nil {
			ts = append(ts,
				// The median of per-round ratios (write_ratio, read_ratio), not
				// the ratio of the median rates.
				newTarget("disk_write_ratio", d.WriteRatio, ">=", 0.9, true),
				newTarget("disk_read_ratio", d.ReadRatio, ">=", 0.9, true))
		}
		if rl := c.Reload; rl != nil {
			// The whole reload path from pinned memory (lookup, H2D, Ready)
			// against a copy() of the same bytes timed in the same round. The
			// disk reload has no target: its reference is not timed in the
			// same rounds, and this VM's disk swings 2x between rounds (see
			// ReloadResult).
			ts = append(ts, newTarget("reload_pinned_over_copy", rl.PinnedOverCopy, ">=", 0.8, true))
		}
	}
	if rm := r.Remote; rm != nil {
		ts = append(ts,
			newTarget("remote_put_gbps/raw_set_gbps", rm.PutGBps/rm.RawSetGBps, ">=", 0.9, true),
			newTarget("remote_get_gbps/raw_get_gbps", rm.GetGBps/rm.RawGetGBps, ">=", 0.9, true),
			newTarget("remote_lookup_round_trips", rm.LookupRoundTrips, "<=", 1, true))
	}
	if rp := r.Replay; rp != nil {
		// A skipped pool measured nothing, and a pass too short to time
		// measured noise: their targets are N/A (NaN).
		measured := func(p ReplayPool, v float64) float64 {
			if p.Skipped != "" || rp.TooShort {
				return math.NaN()
			}
			return v
		}
		for _, p := range rp.Pools {
			ts = append(ts,
				newTarget(fmt.Sprintf("replay_manager_over_direct_cost@%d", p.PoolBlocks), measured(p, p.ManagerOverDirectCost), "<=", 1.3, true),
				newTarget(fmt.Sprintf("replay_batch8_over_direct_cost@%d", p.PoolBlocks), measured(p, p.Batch8OverDirectCost), "<=", 1.3, true))
		}
		if len(rp.Pools) > 0 {
			// 50x nano-vllm's 25-47 k blocks/s: about 2.3 M blocks/s at 1,024 blocks.
			p0 := rp.Pools[0]
			ts = append(ts, newTarget(fmt.Sprintf("replay_direct_blocks_per_s@%d", p0.PoolBlocks),
				measured(p0, p0.BlocksPerS["direct"]), ">=", 2.3e6, true))
		}
	}
	if t := r.Trace; t != nil {
		for _, c := range t.Capacities {
			// Issue 16: never below the best classic policy, and 10% above it
			// where the best classic gets less than half of OPT. Its third
			// target, 0.95 of OPT, is for the demo's tiers at their total
			// capacity (the demo prints hit ratio / OPT); a single cache's
			// ratio to OPT is a column of the table, not a target. Where no
			// classic policy hits, Adaptive passes if it hits at all
			// (+Inf) and there is nothing to judge if it does not (NaN).
			limit := 1.0
			if c.BestOverOPT == nil || *c.BestOverOPT < 0.5 {
				limit = 1.1
			}
			ts = append(ts, newTarget(fmt.Sprintf("adaptive_over_best_classic@%d", c.CapacityBlocks),
				c.adaptiveOverBest(), ">=", limit, true))
		}
	}
	return ts
}

func writeJSON(w io.Writer, r *Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// writeHuman prints the report as aligned tables, one section per suite.
func writeHuman(w io.Writer, r *Report) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	m := r.Machine
	p("kvbench (%s mode)\n", r.Mode)
	p("machine: %s, %d cores, %s %s/%s, gpu backend %q, %s\n\n", m.CPUModel, m.Cores, m.GoVersion, m.GOOS, m.GOARCH, m.GPUBackend, m.Date)

	if a := r.Alloc; a != nil {
		p("alloc: %d-block sequences of %d tokens/block, %d shared stem blocks (%d stems) + private tail; pools kept warm; each line says how it was timed\n",
			a.SeqBlocks, a.BlockTokens, a.StemBlocks, a.Stems)
		direct := fmt.Sprintf("median of %d rounds of %d sequences, 3 pools interleaved", a.DirectRounds, a.DirectSeqsPerRound)
		actor := fmt.Sprintf("one %g s run", a.ActorWindowS)
		p("  direct core, %d-block pool\t%.3g blocks/s\t(%.1f ns/block, %.0f%% hits, %.2f evictions/block; %s)\n",
			a.PoolBlocks, a.DirectBlocksPerS, 1e9/a.DirectBlocksPerS, 100*a.HitFraction, a.EvictionsPerBlock, direct)
		p("  direct core, 1k-block pool\t%.1f ns/block\t(%s)\n", a.NsPerBlock1k, direct)
		p("  direct core, 1M-block pool\t%.1f ns/block\t(%s)\n", a.NsPerBlock1m, direct)
		if a.ActorBuilt {
			p("  actor, 1 client, batch %d\t%.3g blocks/s\t(%.2fx the direct cost; %s)\n", a.ActorBatch, a.ActorBlocksPerS, a.ActorOverDirectCost, actor)
			p("  actor, %d clients, batch %d\t%.3g blocks/s\t(%s)\n", a.ActorClients, a.ActorBatch, a.ActorParallelBlocksPerS, actor)
		}
		if a.LongBlockTokens > 0 {
			p("  direct core, %d tokens/block\t%.3g blocks/s\t(%d-block pool; median of %d rounds of %d sequences)\n",
				a.LongBlockTokens, a.LongDirectBlocksPerS, a.PoolBlocks, a.LongDirectRounds, a.LongDirectSeqsPerRound)
			if a.ActorBuilt {
				p("  actor, 1 client, %d tokens/block\t%.3g blocks/s\t(%.2fx the direct cost; %s)\n", a.LongBlockTokens, a.LongActorBlocksPerS, a.LongActorOverDirectCost, actor)
			}
		}
		if a.Note != "" {
			p("  %s\n", a.Note)
		}
		p("\n")
	}
	if rm := r.Remote; rm != nil {
		p("remote: %d blocks of %d MiB in %d KiB chunks per round, %d rounds, server %s (cluster: %v)\n",
			rm.Blocks, rm.BlockBytes>>20, rm.ChunkBytes>>10, rm.Rounds, rm.Server, rm.Cluster)
		p("  pipelined SET reference\t%.2f GB/s\t\n", rm.RawSetGBps)
		p("  tier write (chunks + records)\t%.2f GB/s\t%.0f%% of SET\n", rm.PutGBps, 100*rm.PutGBps/rm.RawSetGBps)
		p("  pipelined GET reference\t%.2f GB/s\t\n", rm.RawGetGBps)
		p("  tier read (verified)\t%.2f GB/s\t%.0f%% of GET\n", rm.GetGBps, 100*rm.GetGBps/rm.RawGetGBps)
		p("  round trips per prefix lookup\t%.0f\t\n", rm.LookupRoundTrips)
	}
	if c := r.Copy; c != nil {
		p("copy: batches of %d blocks of %d MiB, %d interleaved rounds, device %q (host buffer pinned: %v)\n",
			c.BatchBlock, c.BlockBytes>>20, c.Rounds, c.Device, c.HostPinned)
		p("  copy() reference\t%.2f GB/s\t\n", c.MemmoveGBps)
		p("  D2H (offload)\t%.2f GB/s\t%.0f%% of copy()\n", c.D2HGBps, 100*c.D2HGBps/c.MemmoveGBps)
		p("  H2D (onboard)\t%.2f GB/s\t%.0f%% of copy()\n", c.H2DGBps, 100*c.H2DGBps/c.MemmoveGBps)
		if c.LayerSepSegmentBytes > 0 {
			p("  layer-separate D2H (gather %d-byte segments)\t%.2f GB/s\t%.0f%% of copy()\n", c.LayerSepSegmentBytes, c.LayerSepD2HGBps, 100*c.LayerSepD2HGBps/c.MemmoveGBps)
			p("  layer-separate H2D (scatter)\t%.2f GB/s\t%.0f%% of copy()\n", c.LayerSepH2DGBps, 100*c.LayerSepH2DGBps/c.MemmoveGBps)
			p("  layer-separate / block-contiguous time\t%.2fx\t\n", c.LayerSepTimeRatio)
		}
		if d := c.Disk; d != nil {
			p("disk: %d blocks of %d MiB per round, %d rounds, in %s, store I/O mode %s (reference file the same)\n",
				d.Blocks, d.BlockBytes>>20, d.Rounds, d.Dir, d.IOMode)
			p("  pwrite reference\t%.2f GB/s\t\n", d.RawWriteGBps)
			p("  disk tier write\t%.2f GB/s\t%.0f%% of pwrite (median of per-round ratios)\n", d.DiskWriteGBps, 100*d.WriteRatio)
			p("  pread reference\t%.2f GB/s\t\n", d.RawReadGBps)
			p("  disk tier read\t%.2f GB/s\t%.0f%% of pread (median of per-round ratios)\n", d.DiskReadGBps, 100*d.ReadRatio)
		}
		if rl := c.Reload; rl != nil {
			p("reload through the Manager (Allocate until Ready, deadline off): %d blocks of %d MiB, %d rounds\n",
				rl.Blocks, rl.BlockBytes>>20, rl.Rounds)
			p("  from pinned\t%.2f GB/s\t%.0f%% of copy() (median of per-round ratios), %.0f%% of H2D\n", rl.PinnedGBps, 100*rl.PinnedOverCopy, 100*rl.PinnedOfH2D)
			p("  from disk\t%.2f GB/s\t%.0f%% of disk tier read\n", rl.DiskGBps, 100*rl.DiskOfDiskRd)
		}
		p("\n")
	}
	if t := r.Trace; t != nil {
		p("trace: %s, %d requests, %d block refs, %d-token blocks, chained: %v\n", t.Trace, t.Requests, t.BlockRefs, t.BlockTokens, t.Chained)
		if t.Chained {
			p("  %s, %s\n", optDoc, optChained)
		} else {
			p("  %s, %s\n", optDoc, optNotChained)
		}
		var hdr []string
		for _, k := range tracePolicies {
			hdr = append(hdr, policyName(k))
		}
		p("  capacity\t%s\topt\tinfinite\tbest classic\tbest/opt\tadaptive/opt\tadaptive/best\tns/ref lru, adaptive\t\n", strings.Join(hdr, "\t"))
		for _, c := range t.Capacities {
			p("  %d\t", c.CapacityBlocks)
			for _, k := range tracePolicies {
				p("%.2f%%\t", 100*c.HitRatio[policyName(k)])
			}
			best := c.BestPolicy
			if best == "" {
				best = "-" // no classic policy hits
			}
			p("%.2f%%\t%.2f%%\t%s\t%s\t%s\t%s\t%.0f, %.0f\t\n", 100*c.OPTHitRatio, 100*c.InfiniteHitRatio, best,
				formatValue(orNaN(c.BestOverOPT)), formatValue(orNaN(c.AdaptiveOverOPT)), formatValue(c.adaptiveOverBest()), c.NsPerRef["lru"], c.NsPerRef["adaptive"])
		}
		p("  adaptive memory: %.0f bytes per tracked id (65,536-block policy after a 1M-id scan)\n", t.AdaptiveBytesPerID)
		p("\n")
	}
	if rp := r.Replay; rp != nil {
		p("replay: %s, %d requests, %d blocks of %d tokens a pass, allocated (hashing included), committed and freed\n",
			rp.Trace, rp.Requests, rp.Blocks, rp.BlockTokens)
		p("  pool\tdirect\tmanager\tmanager batch %d\thits direct, manager, batch\tmanager/direct cost\tbatch/direct cost\t\n", replayBatch)
		for _, x := range rp.Pools {
			if x.Skipped != "" {
				p("  %d\tskipped\t-\t-\t-\t-\t-\t\n", x.PoolBlocks) // the reason below the table
				continue
			}
			p("  %d\t%.3g blocks/s\t%.3g blocks/s\t%.3g blocks/s\t%.1f%%, %.1f%%, %.1f%%\t%.2fx\t%.2fx\t\n", x.PoolBlocks,
				x.BlocksPerS["direct"], x.BlocksPerS["manager"], x.BlocksPerS["manager_batch8"],
				100*x.HitRatio["direct"], 100*x.HitRatio["manager"], 100*x.HitRatio["manager_batch8"],
				x.ManagerOverDirectCost, x.Batch8OverDirectCost)
		}
		for _, x := range rp.Pools {
			if x.Skipped != "" {
				p("  pool %d skipped: %s\n", x.PoolBlocks, x.Skipped)
			}
		}
		if rp.TooShort {
			p("  a pass allocates %d blocks, under %d: too short to time (cold caches and the clock, not the paths), so the replay targets are N/A\n", rp.Blocks, replayMinBlocks)
		}
		p("  %s\n\n", rp.Note)
	}
	p("targets:\n")
	for _, t := range r.Targets {
		v := math.NaN()
		switch {
		case t.Value != nil:
			v = *t.Value
		case t.Infinite:
			v = math.Inf(1)
		}
		p("  %s\t%s %s %.2f\t%s\n", t.Name, formatValue(v), t.Cmp, t.Limit, t.Status)
	}
	return tw.Flush()
}

// formatValue prints a figure with three decimals, "inf" for a positive figure
// over zero, and "n/a" for zero over zero.
func formatValue(x float64) string {
	switch {
	case math.IsInf(x, 1):
		return "inf"
	case math.IsNaN(x):
		return "n/a"
	}
	return fmt.Sprintf("%.3f", x)
}
