package kvtier

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

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
