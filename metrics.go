package kvtier

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/kvtier/kvtier/messages"
)

// Prometheus metrics (Config.Registerer). Tier counters are read from Stats
// when the registry is scraped, so the hot path pays nothing for them;
// transfers are observed as they finish, off the actors (LinkObserver).
// Names follow Prometheus conventions: kvtier_ prefix, base units (bytes,
// seconds), _total on counters. MetricNames lists them.

// metricsScrapeTimeout bounds the Stats call of one scrape.
const metricsScrapeTimeout = 2 * time.Second

// metricDef is one metric the collector exports from Stats.
type metricDef struct {
	name, help string
	kind       prometheus.ValueType
	labels     []string
}

var tierMetrics = []metricDef{
	{"kvtier_tier_capacity_blocks", "Blocks the tier holds at most.", prometheus.GaugeValue, []string{"tier"}},
	{"kvtier_tier_capacity_bytes", "Bytes of KV the tier holds at most (capacity blocks x block bytes).", prometheus.GaugeValue, []string{"tier"}},
	{"kvtier_tier_used_blocks", "Blocks holding data or owned by sequences.", prometheus.GaugeValue, []string{"tier"}},
	{"kvtier_tier_used_bytes", "Bytes of the used blocks.", prometheus.GaugeValue, []string{"tier"}},
	{"kvtier_tier_in_flight", "Transfers in flight on the tier.", prometheus.GaugeValue, []string{"tier"}},
	{"kvtier_tier_hit_blocks_total", "Blocks looked up and found on the tier.", prometheus.CounterValue, []string{"tier"}},
	{"kvtier_tier_miss_blocks_total", "Blocks looked up and not found on the tier.", prometheus.CounterValue, []string{"tier"}},
	{"kvtier_tier_evictions_total", "Blocks the tier evicted, by reason.", prometheus.CounterValue, []string{"tier", "reason"}},
	{"kvtier_tier_writes_denied_total", "Writes into the tier denied, by reason.", prometheus.CounterValue, []string{"tier", "reason"}},
	{"kvtier_tier_written_blocks_total", "GPU and pinned: blocks the tier wrote down to the tier below; disk and remote: blocks written into the tier (the same copies seen from below; kvtier_link_blocks_total counts each copy once; remote: blocks this node sent, not those a peer had stored).", prometheus.CounterValue, []string{"tier"}},
	{"kvtier_tier_loaded_blocks_total", "GPU and pinned: blocks the tier copied up from a tier below; disk and remote: blocks the tier served upwards.", prometheus.CounterValue, []string{"tier"}},
	{"kvtier_tier_load_failures_total", "Blocks that did not arrive, by reason: failed (copy, I/O or corrupt), late (past the deadline), mismatch (digest of another prefix).", prometheus.CounterValue, []string{"tier", "reason"}},
	{"kvtier_tier_double_get_skips_total", "Lower-tier hits not fetched: below the double-get thresholds.", prometheus.CounterValue, []string{"tier"}},
	{"kvtier_lookup_tokens_total", "Prompt tokens allocations looked up, by namespace: the denominator of the hit ratios.", prometheus.CounterValue, []string{"namespace"}},
	{"kvtier_hit_tokens_total", "Leading prompt tokens served by each tier, by namespace.", prometheus.CounterValue, []string{"tier", "namespace"}},
	{"kvtier_events_published_batches_total", "KV-event batches numbered and published (Config.Events).", prometheus.CounterValue, nil},
	{"kvtier_events_dropped_batches_total", "KV-event batches dropped because the send queue was full: sequence gaps subscribers see (still replayable).", prometheus.CounterValue, nil},
	{"kvtier_events_resident_blocks", "Blocks each medium holds as the KV-event stream says (GPU, CPU, STORAGE, REMOTE).", prometheus.GaugeValue, []string{"medium"}},
	{"kvtier_tier_overdue_blocks_total", "GPU: blocks of loads past their read deadline that finish late (as hits, or failed if the copy fails) instead of becoming misses at it: their copy up was under way and too few GPU blocks were free to swap in. Counted at the deadline.", prometheus.CounterValue, []string{"tier"}},
	{"kvtier_events_subscriber_dropped_batches_total", "KV-event batches dropped for one subscriber whose own send queue was full (it reads too slowly), one per batch and subscriber: sequence gaps that subscriber sees (still replayable).", prometheus.CounterValue, nil},
}

// Link metrics, observed as transfers finish.
const (
	metricLinkBytes    = "kvtier_link_bytes_total"
	metricLinkBlocks   = "kvtier_link_blocks_total"
	metricLinkFailures = "kvtier_link_failed_transfers_total"
	metricLinkSeconds  = "kvtier_link_transfer_seconds"
	metricScrapeErrors = "kvtier_stats_scrape_errors_total"
)

// MetricNames returns the name of every metric kvtier exports (histograms
// also export _bucket, _sum and _count series).
func MetricNames() []string {
	var out []string
	for _, d := range tierMetrics {
		out = append(out, d.name)
	}
	return append(out, metricLinkBytes, metricLinkBlocks, metricLinkFailures, metricLinkSeconds, metricScrapeErrors)
}

// metricsSet is one Manager's metrics: a collector over Stats and the link
// series.
type metricsSet struct {
	m          atomic.Pointer[Manager] // set once New has started every actor
	reg        prometheus.Registerer
	blockBytes float64
	descs      []*prometheus.Desc
	bytes      *prometheus.CounterVec
	blocks     *prometheus.CounterVec
	failures   *prometheus.CounterVec
	seconds    *prometheus.HistogramVec
	scrapeErrs prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, blockBytes int) *metricsSet {
	x := &metricsSet{reg: reg, blockBytes: float64(blockBytes)}
	for _, d := range tierMetrics {
		x.descs = append(x.descs, prometheus.NewDesc(d.name, d.help, d.labels, nil))
	}
	x.bytes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricLinkBytes, Help: "Bytes moved over each link between tiers (a transfer that failed in part counts what moved)."}, []string{"link"})
	x.blocks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricLinkBlocks, Help: "Blocks moved over each link between tiers (a transfer that failed in part counts what moved)."}, []string{"link"})
	x.failures = prometheus.NewCounterVec(prometheus.CounterOpts{Name: metricLinkFailures, Help: "Transfers (copy batches, I/Os, Redis pipelines) that failed, in whole or in part, by link."}, []string{"link"})
	x.seconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: metricLinkSeconds,
		Help:    "Duration of one transfer (a copy batch, a disk I/O, a Redis pipeline) on each link.",
		Buckets: prometheus.ExponentialBuckets(25e-6, 2, 16)}, []string{"link"}) // 25 µs .. 0.8 s
	x.scrapeErrs = prometheus.NewCounter(prometheus.CounterOpts{Name: metricScrapeErrors, Help: "Scrapes whose Stats call failed (the tier series are then absent)."})
	return x
}

// register registers everything on the Registerer; on error nothing stays
// registered.
func (x *metricsSet) register() error {
	var done []prometheus.Collector
	for _, c := range []prometheus.Collector{x, x.bytes, x.blocks, x.failures, x.seconds, x.scrapeErrs} {
		if err := x.reg.Register(c); err != nil {
			for _, d := range done {
				x.reg.Unregister(d)
			}
			return &ConfigError{Field: "Registerer", Value: fmt.Sprintf("%T", x.reg), Reason: err.Error(), Err: err}
		}
		done = append(done, c)
	}
	return nil
}

func (x *metricsSet) unregister() {
	for _, c := range []prometheus.Collector{x, x.bytes, x.blocks, x.failures, x.seconds, x.scrapeErrs} {
		x.reg.Unregister(c)
	}
}

// observe is the actors' LinkObserver.
func (x *metricsSet) observe(l messages.Link, blocks int, bytes int64, d time.Duration, ok bool) {
	name := l.String()
	x.seconds.WithLabelValues(name).Observe(d.Seconds())
	if !ok { // failed, in whole or in part: what moved still counts
		x.failures.WithLabelValues(name).Inc()
	}
	x.bytes.WithLabelValues(name).Add(float64(bytes))
	x.blocks.WithLabelValues(name).Add(float64(blocks))
}

// Describe implements prometheus.Collector.
func (x *metricsSet) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range x.descs {
		ch <- d
	}
}

// Collect implements prometheus.Collector: one Stats call per scrape.
func (x *metricsSet) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), metricsScrapeTimeout)
	defer cancel()
	m := x.m.Load()
	if m == nil { // New has not finished: no tier series yet
		return
	}
	st, err := m.Stats(ctx)
	if err != nil {
		x.scrapeErrs.Inc()
		if !errors.Is(err, ErrClosed) {
			m.cfg.Logger.Warn("kvtier metrics: stats", zap.Error(err))
		}
		return
	}
	emit := func(i int, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(x.descs[i], tierMetrics[i].kind, v, labels...)
	}
	for _, ts := range st.Tiers {
		if ts.Down {
			// Stats has no counters of a tier whose actor stopped for
			// good (zeros): exported, its counters would go down.
			continue
		}
		t := ts.Tier.String()
		emit(0, float64(ts.Blocks), t)
		emit(1, float64(ts.Blocks)*x.blockBytes, t)
		emit(2, float64(ts.UsedBlocks), t)
		emit(3, float64(ts.BytesUsed), t)
		emit(4, float64(ts.InFlight), t)
		emit(5, float64(ts.Hits), t)
		emit(6, float64(ts.Misses), t)
		emit(7, float64(ts.Evictions), t, "capacity")
		emit(8, float64(ts.Denied), t, "quota_or_space")
		emit(9, float64(ts.Offloaded), t)
		emit(10, float64(ts.Onboarded), t)
		emit(11, float64(ts.Failed), t, "failed")
		emit(11, float64(ts.Timeouts), t, "late")
		emit(11, float64(ts.Mismatches), t, "mismatch")
		emit(12, float64(ts.DoubleGetSkips), t)
		if ts.Tier == messages.GPU {
			emit(18, float64(ts.Overdue), t)
		}
	}
	if ev := st.Events; ev != nil {
		emit(15, float64(ev.Published))
		emit(16, float64(ev.Dropped))
		emit(19, float64(ev.SubscriberDrops))
		for md, n := range ev.Resident {
			emit(17, float64(n), md)
		}
	}
	for ns, c := range st.Tier(GPU).Tokens {
		emit(13, float64(c.Prompt), ns)
		for i, n := range c.Served {
			emit(14, float64(n), messages.TierAt(i).String(), ns)
		}
	}
}

// metricsNamespaces splits Config.MetricsNamespaces.
func metricsNamespaces(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
