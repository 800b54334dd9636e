package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
)

// TestMetricsAfterReplay: with -metrics-addr kvbench serves, after the
// report, the final metrics of every Manager the replay suite created,
// each under its own config label and with its own pool size, until its
// context ends.
func TestMetricsAfterReplay(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"-suite", "replay", "-quick", "-json", "-metrics-addr", "127.0.0.1:0"}, io.Discard, pw)
		pw.Close()
		done <- err
	}()
	const serving = "metrics: serving the final values on "
	url := ""
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, serving+"http://") {
			url = strings.Fields(strings.TrimPrefix(line, serving))[0]
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if url == "" {
		cancel()
		t.Fatalf("kvbench never said it serves metrics: %v", <-done)
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("kvbench stopped serving before its context ended: %v", err)
	default:
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	// config label -> GPU capacity in blocks, and lookup tokens.
	capacity, lookups := map[string]float64{}, map[string]float64{}
	for _, m := range fams["kvtier_tier_capacity_blocks"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["tier"] == "gpu" {
			capacity[labels["config"]] = m.GetGauge().GetValue()
		}
	}
	for _, m := range fams["kvtier_lookup_tokens_total"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "config" {
				lookups[l.GetValue()] += m.GetCounter().GetValue()
			}
		}
	}
	for _, path := range []string{"manager", "manager_batch8"} {
		for _, n := range replayPools {
			config := fmt.Sprintf("replay/%s/pool%d", path, n)
			if got := capacity[config]; got != float64(n) {
				t.Errorf("kvtier_tier_capacity_blocks{config=%q,tier=\"gpu\"} = %v, want %d", config, got, n)
			}
			if lookups[config] <= 0 {
				t.Errorf("kvtier_lookup_tokens_total{config=%q} = %v, want > 0", config, lookups[config])
			}
		}
	}
	if len(capacity) != 2*len(replayPools) {
		t.Errorf("configurations %v, want the %d replay Managers'", capacity, 2*len(replayPools))
	}
}
