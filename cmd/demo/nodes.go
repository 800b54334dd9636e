package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/schedcache"
	"github.com/kvtier/kvtier/scheduler"
	"github.com/kvtier/kvtier/trace"
)

// The multi-node mode (-nodes N): the trace is served by N replicas, each a
// scheduler over its own Manager (GPU + pinned memory), and routed to them
// round-robin or by prefix affinity. With -redis the replicas also share a
// remote tier on that server, so a prefix computed on one replica is a hit
// on another. The replicas run on one logical clock: the demo always steps
// the replica whose clock is behind, so a block one replica writes at time t
// reaches another only for requests after t (plus the write's own latency in
// wall time, which is small here).

// routing sends request i of the trace to a replica.
type routing int

const (
	roundRobin routing = iota + 1
	// prefixAffinity hashes the first affinityBlocks hash ids: the turns of
	// one conversation share them and land on one replica, while a system
	// prompt that every conversation starts with does not pull all of them to
	// one replica.
	prefixAffinity
)

const affinityBlocks = 4

func (r routing) String() string {
	switch r {
	case roundRobin:
		return "round-robin"
	case prefixAffinity:
		return "prefix-affinity"
	}
	return fmt.Sprintf("routing(%d)", int(r))
}

func parseRoutes(s string) ([]routing, error) {
	var out []routing
	for _, f := range strings.Split(s, ",") {
		switch strings.TrimSpace(strings.ToLower(f)) {
		case "round-robin", "rr":
			out = append(out, roundRobin)
		case "prefix-affinity", "affinity":
			out = append(out, prefixAffinity)
		default:
			return nil, fmt.Errorf("unknown routing %q (want round-robin or prefix-affinity)", f)
		}
	}
	return out, nil
}

// route splits reqs across n replicas; each keeps the trace's order.
func route(reqs []trace.Request, n int, r routing) [][]trace.Request {
	out := make([][]trace.Request, n)
	for i, q := range reqs {
		node := i % n
		if r == prefixAffinity {
			h := uint64(1469598103934665603)
			for _, id := range q.HashIDs[:min(affinityBlocks, len(q.HashIDs))] {
				h = (h ^ uint64(id)) * 1099511628211
			}
			node = int(h % uint64(n))
		}
		out[node] = append(out[node], q)
	}
	return out
}

// fleetOutcome is one multi-node configuration's replay.
type fleetOutcome struct {
	route  routing
	shared bool
	res    scheduler.Result // summed over the replicas (TTFT: over all requests)
	perReq []int            // requests per replica
}

// replayFleet runs the replicas of one configuration on one logical clock.
func replayFleet(ctx context.Context, o options, reqs []trace.Request, r routing, shared bool, runID string) (out fleetOutcome, err error) {
	out = fleetOutcome{route: r, shared: shared}
	parts := route(reqs, o.nodes, r)
	type replica struct {
		m     *kvtier.Manager
		cache *schedcache.Cache
		s     *scheduler.Scheduler
		tr    *ttftTracker
	}
	var nodes []*replica
	defer func() {
		for _, n := range nodes {
			if cerr := n.m.Close(ctx); err == nil && cerr != nil {
				err = cerr
			}
		}
	}()
	for i, part := range parts {
		out.perReq = append(out.perReq, len(part))
		if len(part) == 0 {
			continue
		}
		mc, err := managerConfig(o, withPinned, "")
		if err != nil {
			return out, err
		}
		if shared {
			mc.Remote = &kvtier.RemoteConfig{Addrs: o.redis, Cluster: len(o.redis) > 1,
				Prefix: "kvtier-demo-" + runID + "-" + r.String(), TTL: time.Hour}
			// Write through: a block reaches the other replicas as soon as
			// it lands in this one's pinned memory, not when it is evicted.
			mc.DiskIngestion = kvtier.IngestAll
		}
		if o.metrics != nil {
			label := r.String()
			if shared {
				label += "+shared"
			}
			mc.Registerer = o.metrics.Registerer(fmt.Sprintf("%s/replica%d", label, i))
		}
		mc.Events = eventsConfig(o, i)
		m, err := kvtier.New(mc)
		if err != nil {
			return out, fmt.Errorf("replica %d: %w", i, err)
		}
		n := &replica{m: m, tr: newTTFTTracker(part, o.timeScale)}
		nodes = append(nodes, n)
		n.cache = schedcache.New(m, schedcache.Options{Sync: o.sync, NoClass: o.noClass})
		if n.s, err = scheduler.New(&recordingCache{Cache: n.cache, tr: n.tr}, part, schedulerConfig(o, nil)); err != nil {
			return out, err
		}
	}
	for {
		var next *replica
		for _, n := range nodes {
			if !n.s.Done() && (next == nil || n.s.Now() < next.s.Now()) {
				next = n
			}
		}
		if next == nil {
			break
		}
		rep, err := next.s.Step(ctx)
		if err != nil {
			return out, fmt.Errorf("%s: step at %v: %w", r, next.s.Now(), err)
		}
		next.tr.step(rep)
	}
	caches := make([]flusher, len(nodes))
	for i, n := range nodes {
		caches[i] = n.cache
	}
	var fz freezer
	if o.metrics != nil {
		fz = o.metrics
	}
	if err := flushThenFreeze(ctx, caches, fz); err != nil {
		return out, err
	}
	var ttfts []time.Duration
	for _, n := range nodes {
		res := n.s.Result()
		addResult(&out.res, res)
		ttfts = append(ttfts, n.tr.values()...)
	}
	out.res.TTFT = ttftOf(ttfts)
	// The hit ratio of first admissions, as the tier comparison's table
	// counts it: a readmission after a preemption mostly finds its own KV.
	first := out.res.FirstAdmissions()
	out.res.HitRatio = ratio(first.Hits(), first.Tokens)
	return out, nil
}

// flusher is a replica's cache, to Flush at the end of a run.
type flusher interface {
	Flush(ctx context.Context) error
}

// freezer keeps the metrics' final values (promserve.Sink).
type freezer interface {
	Freeze() error
}

// flushThenFreeze flushes every cache, so that the copies still in flight
// (with -sync=false) land, and only then freezes the metrics (fz may be nil),
// as replay does: frozen before the flush, they could miss the last writes.
func flushThenFreeze(ctx context.Context, caches []flusher, fz freezer) error {
	for _, c := range caches {
		if err := c.Flush(ctx); err != nil {
			return err
		}
	}
	if fz == nil {
		return nil
	}
	return fz.Freeze()
}

// addResult adds the counters of b to a.
func addResult(a *scheduler.Result, b scheduler.Result) {
	a.Requests += b.Requests
	a.PromptTokens += b.PromptTokens
	a.Rejected += b.Rejected
	a.RejectedPromptTokens += b.RejectedPromptTokens
	a.AdmittedTokens += b.AdmittedTokens
	a.GPUTokens += b.GPUTokens
	a.PinnedTokens += b.PinnedTokens
	a.DiskTokens += b.DiskTokens
	a.RemoteTokens += b.RemoteTokens
	a.PrefillTokens += b.PrefillTokens
	a.OutputTokens += b.OutputTokens
	a.PrefillSaved = a.PrefillSaved.Plus(b.PrefillSaved)
	a.Readmissions = a.Readmissions.Plus(b.Readmissions)
}

// ttftOf returns the nearest-rank percentiles of xs.
func ttftOf(xs []time.Duration) scheduler.TTFT {
	if len(xs) == 0 {
		return scheduler.TTFT{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	at := func(p float64) time.Duration {
		i := int(p*float64(len(s)) + 0.999999)
		return s[min(max(i-1, 0), len(s)-1)]
	}
	return scheduler.TTFT{P50: at(0.50), P90: at(0.90), P99: at(0.99)}
}

// runFleet is the multi-node mode: every routing, without and (with -redis)
// with the shared tier. w is the trace's offered work (its requests less
// the tooLong ones, which the replicas reject on arrival); autoScale says
// that run chose o.timeScale for -load and divided it by the number of
// replicas.
func runFleet(ctx context.Context, o options, reqs []trace.Request, name string, table io.Writer, w offered, autoScale bool, tooLong int) error {
	runID := fmt.Sprintf("%d-%d", os.Getpid(), time.Now().UnixNano())
	var outs []fleetOutcome
	for _, r := range o.routes {
		for _, shared := range []bool{false, true} {
			if shared && len(o.redis) == 0 {
				continue
			}
			out, err := replayFleet(ctx, o, reqs, r, shared, runID)
			if err != nil {
				return err
			}
			outs = append(outs, out)
		}
	}
	if len(outs) == 0 {
		return errors.New("-nodes: no configuration to run")
	}
	fmt.Fprintf(table, "kvtier demo, %s: %s: %s, %s; each replica GPU %s + pinned %s",
		count(o.nodes, "replica"), name, count(len(reqs), "request"), blockSizes(o), blocksAndTokens(o.gpuBlocks, o), blocksAndTokens(o.pinnedBlocks, o))
	if len(o.redis) > 0 {
		fmt.Fprintf(table, "; shared tier: Redis at %s", strings.Join(o.redis, ","))
	}
	fmt.Fprintf(table, "\n%s\n", fleetArrivals(w, o.timeScale, o.nodes, o.load, autoScale))
	if tooLong > 0 {
		fmt.Fprintln(table, rejectedNote(tooLong, o))
	}
	fmt.Fprintln(table)
	tw := tabwriter.NewWriter(table, 0, 0, 2, ' ', tabwriter.AlignRight)
	p := func(format string, args ...any) { fmt.Fprintf(tw, format, args...) }
	p("\t")
	for _, x := range outs {
		label := x.route.String()
		if x.shared {
			label += " + shared"
		}
		p("%s\t", label)
	}
	p("\n")
	row := func(name string, f func(x fleetOutcome) string) {
		p("%s\t", name)
		for _, x := range outs {
			p("%s\t", f(x))
		}
		p("\n")
	}
	pct := func(n, d int64) string {
		if d == 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(d))
	}
	row("requests per replica", func(x fleetOutcome) string { return fmt.Sprint(x.perReq) })
	if tooLong > 0 || slices.ContainsFunc(outs, func(x fleetOutcome) bool { return x.res.Rejected > 0 }) {
		// The rows below count the served requests only.
		row("rejected requests (never fit)", func(x fleetOutcome) string { return fmt.Sprint(x.res.Rejected) })
	}
	// Hits at each request's first admission, over its prompt tokens: a
	// readmission after a preemption mostly finds its own KV.
	row("served from GPU", func(x fleetOutcome) string { f := x.res.FirstAdmissions(); return pct(f.GPU, f.Tokens) })
	row("served from pinned", func(x fleetOutcome) string { f := x.res.FirstAdmissions(); return pct(f.Pinned, f.Tokens) })
	row("served from shared tier", func(x fleetOutcome) string { f := x.res.FirstAdmissions(); return pct(f.Remote, f.Tokens) })
	// With no request served (every one rejected) there is no hit ratio
	// and no TTFT: "-", not a 0 no request measured.
	served := func(x fleetOutcome, f func() string) string {
		if x.res.Requests == 0 {
			return "-"
		}
		return f()
	}
	row("hit ratio", func(x fleetOutcome) string {
		return served(x, func() string { return fmt.Sprintf("%.1f%%", 100*x.res.HitRatio) })
	})
	row("prefill tokens computed", func(x fleetOutcome) string { return commas(x.res.PrefillTokens) })
	row("prefill compute saved", func(x fleetOutcome) string {
		return fmt.Sprintf("%.1f s", x.res.FirstAdmissions().PrefillSaved.Total().Seconds())
	})
	row("  of which by the shared tier", func(x fleetOutcome) string {
		return fmt.Sprintf("%.1f s", x.res.FirstAdmissions().PrefillSaved.Remote.Seconds())
	})
	row("TTFT p50", func(x fleetOutcome) string { return served(x, func() string { return fmtDur(x.res.TTFT.P50) }) })
	row("TTFT p90", func(x fleetOutcome) string { return served(x, func() string { return fmtDur(x.res.TTFT.P90) }) })
	row("TTFT p99", func(x fleetOutcome) string { return served(x, func() string { return fmtDur(x.res.TTFT.P99) }) })
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(table, "\nshared tier: every block that lands in a replica's pinned memory is written through to Redis; a prefix that misses a replica's own tiers is looked up there (one round trip) and loaded at the cost model's 5 GB/s + 500 µs.")
	if len(o.redis) == 0 {
		fmt.Fprintln(table, "run with -redis HOST:PORT to add the shared tier (e.g. eval \"$(.ci/redis.sh start)\"; go run ./cmd/demo -nodes 4 -redis $KVTIER_REDIS).")
	}
	return nil
}

// fleetArrivals describes the fleet's arrival rate: with the scale chosen
// for -load (and divided by the n replicas, as run does), n times the
// traffic the single-node run gives one GPU; with -time-scale, the traffic a
// single-node run at that scale gives one GPU, split across the replicas. A
// trace whose requests all arrive at once (w has no span) has no rate to
// scale, and says so, as offered.describe does for the single-node run.
func fleetArrivals(w offered, scale float64, n int, load float64, autoScale bool) string {
	if w.Span <= 0 {
		return fmt.Sprintf("every request that can run arrives at once, or there is one at most: no arrival rate for -load or -time-scale to scale\n"+
			"offered GPU work: with no cache, %.1f s of prefill and %.1f s of decode compute (batched), all at time 0, split across %s",
			w.Prefill.Seconds(), w.Decode.Seconds(), count(n, "replica"))
	}
	if autoScale {
		return fmt.Sprintf("arrivals at %s (the time scale chosen for -load %g, divided by %d): the fleet gets %d times the traffic one GPU gets in the single-node run",
			arrivalRate(scale), load, n, n)
	}
	return fmt.Sprintf("arrivals at %s (-time-scale): the traffic one GPU gets in a single-node run at this scale, split across %s", arrivalRate(scale), count(n, "replica"))
}

func fmtDur(d time.Duration) string {
	switch {
	case d >= time.Second:
		return fmt.Sprintf("%.2f s", d.Seconds())
	default:
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
}
