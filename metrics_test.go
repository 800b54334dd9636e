package kvtier

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/messages"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// scrape fetches /metrics from a server over reg and parses it.
func scrape(t *testing.T, reg *prometheus.Registry) map[string]*dto.MetricFamily {
	t.Helper()
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		t.Fatalf("%v\n%s", err, body)
	}
	return fams
}

// value returns the value of the series of family name with labels (pairs).
func value(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	t.Helper()
	f, ok := fams[name]
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	for _, m := range f.GetMetric() {
		match := true
		for i := 0; i < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
					found = true
				}
			}
			match = match && found
		}
		if !match {
			continue
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	t.Fatalf("no series %s%v", name, labels)
	return 0
}

// TestMetricsScrapeMatchesStats: after a workload with GPU hits, pinned
// loads and tenants, the metrics scraped over HTTP equal Stats: tier
// counters, hit tokens per tier and namespace with their denominator
// (listed salts apart, the rest "other", no salt "default"), and the links'
// blocks and transfer durations.
func TestMetricsScrapeMatchesStats(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	m := newManager(t, Config{GPUBlocks: 8, PinnedBytes: 16 * 4096, Registerer: reg, MetricsNamespaces: "tenant-a"})
	prompts := map[string][]int64{"": toks(10, 2*bt), "tenant-a": toks(200, 2*bt), "tenant-b": toks(300, 2*bt)}
	var promptTokens = map[string]int{}
	seq := uint64(0)
	for round := range 3 {
		for salt, p := range prompts {
			seq++
			r, err := m.Allocate(ctx, AllocRequest{Seq: seq, Tokens: p, Salt: salt})
			if err != nil {
				t.Fatal(err)
			}
			wait(t, r)
			promptTokens[salt] += len(p)
			if err := commitFree(ctx, m, seq); err != nil {
				t.Fatal(err)
			}
		}
		if round == 1 {
			// Push every tenant block down to pinned memory, so the last
			// round loads: once the copies ahead of need are out (they pin
			// the blocks they read), one request as large as the GPU
			// evicts them all, and their writes land in the index before
			// the last round looks.
			if err := m.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			seq++
			r, err := m.Allocate(ctx, AllocRequest{Seq: seq, Tokens: toks(5000, 8*bt)})
			if err != nil {
				t.Fatal(err)
			}
			wait(t, r)
			promptTokens[""] += 8 * bt
			if err := commitFree(ctx, m, seq); err != nil {
				t.Fatal(err)
			}
			if err := m.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := m.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fams := scrape(t, reg)
	for _, ts := range st.Tiers {
		tier := ts.Tier.String()
		for name, want := range map[string]float64{
			"kvtier_tier_hit_blocks_total":     float64(ts.Hits),
			"kvtier_tier_miss_blocks_total":    float64(ts.Misses),
			"kvtier_tier_capacity_blocks":      float64(ts.Blocks),
			"kvtier_tier_written_blocks_total": float64(ts.Offloaded),
			"kvtier_tier_loaded_blocks_total":  float64(ts.Onboarded),
		} {
			if got := value(t, fams, name, "tier", tier); got != want {
				t.Errorf("%s{tier=%s} = %v, Stats says %v", name, tier, got, want)
			}
		}
	}
	if got := value(t, fams, "kvtier_tier_overdue_blocks_total", "tier", "gpu"); got != float64(st.Tier(GPU).Overdue) {
		t.Errorf("kvtier_tier_overdue_blocks_total{tier=gpu} = %v, Stats says %d", got, st.Tier(GPU).Overdue)
	}
	if st.Tier(GPU).Hits == 0 || st.Tier(GPU).Onboarded == 0 {
		t.Fatalf("the workload did not hit and load: %v", st.Tier(GPU))
	}
	for ns, salt := range map[string]string{"default": "", "tenant-a": "tenant-a", "other": "tenant-b"} {
		if got := value(t, fams, "kvtier_lookup_tokens_total", "namespace", ns); got != float64(promptTokens[salt]) {
			t.Errorf("lookup tokens of %s = %v, want %d", ns, got, promptTokens[salt])
		}
	}
	var hitTokens float64
	for _, tier := range []string{"gpu", "pinned", "disk", "remote"} {
		for _, ns := range []string{"default", "tenant-a", "other"} {
			hitTokens += value(t, fams, "kvtier_hit_tokens_total", "tier", tier, "namespace", ns)
		}
	}
	if want := float64(st.Tier(GPU).Hits*bt) + float64(st.Tier(GPU).Onboarded*bt); hitTokens != want {
		t.Errorf("hit tokens over tiers and namespaces = %v, want GPU hits + loads = %v", hitTokens, want)
	}
	if got := value(t, fams, "kvtier_link_blocks_total", "link", "host_to_gpu"); got != float64(st.Tier(GPU).Onboarded) {
		t.Errorf("host_to_gpu blocks = %v, GPU onboarded %d", got, st.Tier(GPU).Onboarded)
	}
	if got := value(t, fams, "kvtier_link_transfer_seconds", "link", "gpu_to_host"); got == 0 {
		t.Error("no gpu_to_host transfer observed")
	}
	for _, name := range MetricNames() {
		if name == metricLinkFailures || name == metricScrapeErrors || strings.HasPrefix(name, "kvtier_events_") {
			continue // zero here: absent or 0; events: TestMetricsEvents
		}
		if _, ok := fams[name]; !ok {
			t.Errorf("metric %s not exported", name)
		}
	}
}

// TestMetricsRegistration: a second Manager on the same Registerer fails
// New with a *ConfigError for Registerer (its series would collide; it was
// a bare ErrBadConfig naming no field); Close unregisters, so the next
// Manager registers again.
func TestMetricsRegistration(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(Config{GPUBlocks: 4, BlockTokens: bt, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(Config{GPUBlocks: 4, BlockTokens: bt, Registerer: reg})
	if ce, ok := errors.AsType[*ConfigError](err); !ok || ce.Field != "Registerer" || !errors.Is(err, ErrBadConfig) {
		t.Fatalf("a second Manager on one registry: %v, want a *ConfigError for Registerer", err)
	}
	if err := m.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	m2, err := New(Config{GPUBlocks: 4, BlockTokens: bt, Registerer: reg})
	if err != nil {
		t.Fatalf("after Close: %v", err)
	}
	if err := m2.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestMetricsEvents: with Config.Events the event stream's counters are
// exported and equal Stats.Events.
func TestMetricsEvents(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	m := newManager(t, Config{GPUBlocks: 8, Registerer: reg, Events: &EventsConfig{Endpoint: "tcp://*:0"}})
	for seq := range uint64(4) {
		if _, err := m.Allocate(ctx, AllocRequest{Seq: seq, Tokens: toks(int(seq)*100, 2*bt)}); err != nil {
			t.Fatal(err)
		}
		if err := commitFree(ctx, m, seq); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := m.EventsSeq(ctx); err != nil { // every change published before the scrape
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	st, err := m.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Events == nil || st.Events.Published < 2 || st.Events.Resident["GPU"] != 8 {
		t.Fatalf("stats %+v", st.Events)
	}
	got := map[string]float64{}
	for _, f := range fams {
		for _, mt := range f.GetMetric() {
			name := f.GetName()
			for _, l := range mt.GetLabel() {
				name += "/" + l.GetValue()
			}
			got[name] = mt.GetCounter().GetValue() + mt.GetGauge().GetValue()
		}
	}
	for name, want := range map[string]float64{"kvtier_events_published_batches_total": float64(st.Events.Published),
		"kvtier_events_dropped_batches_total": 0, "kvtier_events_resident_blocks/GPU": 8} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}

// TestMetricsFailedTransferCountsWhatMoved: a failed transfer counts as a
// failure and in the latency histogram, and as bytes and blocks only what
// its observer says moved: nothing for a failed copy batch or I/O, the
// blocks that landed for a Redis pipeline that failed in part.
func TestMetricsFailedTransferCountsWhatMoved(t *testing.T) {
	reg := prometheus.NewRegistry()
	x := newMetrics(reg, 4096)
	reg.MustRegister(x.bytes, x.blocks, x.failures, x.seconds) // the link series alone: the tier ones need a Manager
	x.observe(messages.LinkHostToRemote, 4, 4*4096, time.Millisecond, true)
	x.observe(messages.LinkHostToRemote, 0, 0, time.Millisecond, false)
	x.observe(messages.LinkHostToRemote, 2, 2*4096, time.Millisecond, false) // 2 blocks of a batch landed
	fams := scrape(t, reg)
	link := messages.LinkHostToRemote.String()
	if b, n, f := value(t, fams, metricLinkBytes, "link", link), value(t, fams, metricLinkBlocks, "link", link),
		value(t, fams, metricLinkFailures, "link", link); b != 6*4096 || n != 6 || f != 2 {
		t.Fatalf("bytes %v blocks %v failures %v, want %d 6 2", b, n, f, 6*4096)
	}
}
