package kvtier

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/kvtier/kvtier/messages"
)

// dashboardPath is the Grafana dashboard shipped for kvtier's metrics.
const dashboardPath = "docs/grafana/kvtier.json"

// grafanaPanel is the part of a Grafana panel the check reads: a row's
// panels are nested when the row is collapsed.
type grafanaPanel struct {
	Title   string `json:"title"`
	Type    string `json:"type"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
	Panels []grafanaPanel `json:"panels"`
}

type grafanaDashboard struct {
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

var (
	// promMetricName finds kvtier metric names in PromQL: an identifier that
	// starts with kvtier_, not preceded by an identifier character.
	promMetricName = regexp.MustCompile(`(?:^|[^a-zA-Z0-9_:])(kvtier_[a-zA-Z0-9_:]*)`)
	// grafanaVar finds template variables ($x, ${x}) in PromQL.
	grafanaVar = regexp.MustCompile(`\$\{?([a-zA-Z_][a-zA-Z0-9_]*)`)
)

// metricTypes maps every name in MetricNames to its type: the tier metrics'
// from their definitions, the link metrics' from a registry they were
// observed on.
func metricTypes(t *testing.T) map[string]dto.MetricType {
	t.Helper()
	types := map[string]dto.MetricType{}
	for _, d := range tierMetrics {
		switch d.kind {
		case prometheus.CounterValue:
			types[d.name] = dto.MetricType_COUNTER
		case prometheus.GaugeValue:
			types[d.name] = dto.MetricType_GAUGE
		default:
			t.Fatalf("%s: unexpected value type %v", d.name, d.kind)
		}
	}
	x := newMetrics(nil, 1) // registered below, by hand: x itself needs a Manager
	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{x.bytes, x.blocks, x.failures, x.seconds, x.scrapeErrs} {
		reg.MustRegister(c)
	}
	x.observe(messages.LinkGPUToHost, 1, 1, time.Millisecond, true /* ok */)  // bytes, blocks, seconds
	x.observe(messages.LinkGPUToHost, 1, 1, time.Millisecond, false /* ok */) // failures
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		types[f.GetName()] = f.GetType()
	}
	for _, n := range MetricNames() {
		if _, ok := types[n]; !ok {
			t.Fatalf("MetricNames lists %s but the test does not know its type: teach metricTypes", n)
		}
	}
	return types
}

// dashboardProblems parses a Grafana dashboard and returns what is wrong
// with it: no panels, a query that names no kvtier metric, a kvtier metric
// MetricNames does not list (histograms may take _bucket, _sum or _count),
// or a template variable the dashboard does not define. used holds the
// metric families the queries name.
func dashboardProblems(data []byte, types map[string]dto.MetricType) (problems []string, used map[string]bool) {
	var d grafanaDashboard
	if err := json.Unmarshal(data, &d); err != nil {
		return []string{fmt.Sprintf("not a dashboard: %v", err)}, nil
	}
	used = map[string]bool{}
	vars := map[string]bool{}
	for _, v := range d.Templating.List {
		vars[v.Name] = true
	}
	check := func(where, expr string) {
		if strings.TrimSpace(expr) == "" {
			problems = append(problems, where+": empty query")
			return
		}
		names := promMetricName.FindAllStringSubmatch(expr, -1)
		if len(names) == 0 {
			problems = append(problems, fmt.Sprintf("%s: %q names no kvtier metric", where, expr))
		}
		for _, m := range names {
			family, ok := metricFamily(m[1], types)
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: %s is not in MetricNames()", where, m[1]))
			}
			used[family] = true
		}
		for _, m := range grafanaVar.FindAllStringSubmatch(expr, -1) {
			if !vars[m[1]] && !strings.HasPrefix(m[1], "__") { // $__rate_interval and the like are Grafana's
				problems = append(problems, fmt.Sprintf("%s: variable $%s is not defined", where, m[1]))
			}
		}
	}
	panels := 0
	var walk func(ps []grafanaPanel)
	walk = func(ps []grafanaPanel) {
		for _, p := range ps {
			if p.Type != "row" {
				panels++
				if len(p.Targets) == 0 {
					problems = append(problems, fmt.Sprintf("panel %q has no queries", p.Title))
				}
			}
			for _, tg := range p.Targets {
				check(fmt.Sprintf("panel %q query %s", p.Title, tg.RefID), tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	if panels == 0 {
		problems = append(problems, "the dashboard has no panels")
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			check(fmt.Sprintf("variable %s", v.Name), v.Definition)
		}
	}
	return problems, used
}

// metricFamily returns the family of a series name kvtier exports: a name
// from MetricNames, or a histogram's with _bucket, _sum or _count; false if
// kvtier exports no such series.
func metricFamily(name string, types map[string]dto.MetricType) (string, bool) {
	if _, ok := types[name]; ok {
		return name, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok && types[base] == dto.MetricType_HISTOGRAM {
			return base, true
		}
	}
	return name, false
}

// TestDashboardMetricNames: every query of the shipped dashboard, nested
// rows' panels and template variables included, names only metrics kvtier
// exports, so the dashboard cannot drift from metrics.go unnoticed.
func TestDashboardMetricNames(t *testing.T) {
	types := metricTypes(t)
	data, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	problems, used := dashboardProblems(data, types)
	for _, p := range problems {
		t.Error(p)
	}
	// Every family is on the dashboard: a new metric gets a panel.
	for _, n := range MetricNames() {
		if !used[n] {
			t.Errorf("%s is in no query", n)
		}
	}
}

// TestDashboardCheckFails: the check above catches what it should, on
// dashboards held in memory.
func TestDashboardCheckFails(t *testing.T) {
	types := metricTypes(t)
	dash := func(expr string) string {
		b, err := json.Marshal(expr)
		if err != nil {
			t.Fatal(err)
		}
		return `{"panels": [{"type": "row", "title": "r", "collapsed": true, "panels": [
			{"type": "timeseries", "title": "p", "targets": [{"refId": "A", "expr": ` + string(b) + `}]}]}],
			"templating": {"list": [{"name": "config", "type": "query", "definition": "label_values(kvtier_tier_used_bytes, config)"}]}}`
	}
	for _, tc := range []struct {
		name, json, want string // want "": no problem
	}{
		{"good", dash(`sum(rate(kvtier_link_bytes_total{config=~"$config"}[$__rate_interval]))`), ""},
		{"histogram suffixes", dash(`rate(kvtier_link_transfer_seconds_sum[5m]) / rate(kvtier_link_transfer_seconds_count[5m]) + histogram_quantile(0.9, rate(kvtier_link_transfer_seconds_bucket[5m]))`), ""},
		{"wrong name in a collapsed row", dash(`rate(kvtier_tier_hits_total[5m])`), "kvtier_tier_hits_total is not in MetricNames()"},
		{"bucket of a counter", dash(`rate(kvtier_link_bytes_total_bucket[5m])`), "kvtier_link_bytes_total_bucket is not in MetricNames()"},
		{"prefix of a name", dash(`kvtier_tier_used`), "kvtier_tier_used is not in MetricNames()"},
		{"no kvtier metric", dash(`rate(kvteir_link_bytes_total[5m])`), "names no kvtier metric"},
		{"undefined variable", dash(`kvtier_tier_used_bytes{namespace=~"$namespace"}`), "variable $namespace is not defined"},
		{"no panels", `{"panels": []}`, "the dashboard has no panels"},
		{"not JSON", `{"panels": [`, "not a dashboard"},
		{"wrong name in a variable", `{"panels": [{"type": "stat", "title": "p", "targets": [{"refId": "A", "expr": "kvtier_tier_used_bytes"}]}],
			"templating": {"list": [{"name": "ns", "type": "query", "definition": "label_values(kvtier_lookup_total, namespace)"}]}}`,
			"kvtier_lookup_total is not in MetricNames()"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			problems, _ := dashboardProblems([]byte(tc.json), types)
			if tc.want == "" {
				if len(problems) > 0 {
					t.Fatalf("problems with a good dashboard: %q", problems)
				}
				return
			}
			for _, p := range problems {
				if strings.Contains(p, tc.want) {
					return
				}
			}
			t.Fatalf("problems %q, want one with %q", problems, tc.want)
		})
	}
}
