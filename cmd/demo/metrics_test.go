package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"

	"github.com/kvtier/kvtier/events"
)

// TestMetricsAfterRun: with -metrics-addr the demo serves /metrics while it
// runs and, after, each configuration's final values; scraped over HTTP
// they equal the Stats the JSON report carries, per configuration and tier.
func TestMetricsAfterRun(t *testing.T) {
	path, _ := smallTrace(t)
	jsonPath := filepath.Join(t.TempDir(), "out.json")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := run(ctx, []string{"-trace", path, "-configs", "gpu,pinned", "-plot", "", "-json", jsonPath,
			"-metrics-addr", "127.0.0.1:0", "-gpu-blocks", "64", "-pinned-blocks", "256", "-block-tokens", "256"}, io.Discard, pw, false)
		pw.Close()
		done <- err
	}()
	addr := ""
	sc := bufio.NewScanner(pr)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "metrics: serving the final values on http://") {
			addr = strings.Fields(strings.TrimPrefix(line, "metrics: serving the final values on "))[0]
			break
		}
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	if addr == "" {
		cancel()
		t.Fatalf("the demo never said it serves metrics: %v", <-done)
	}
	resp, err := http.Get(addr)
	if err != nil {
		t.Fatal(err)
	}
	var p expfmt.TextParser
	fams, err := p.TextToMetricFamilies(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(jsonPath)
	if err != nil {
		t.Fatal(err)
	}
	var rep jsonReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	series := func(name, config, tier string) (float64, bool) {
		for _, m := range fams[name].GetMetric() {
			var c, tr string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "config":
					c = l.GetValue()
				case "tier":
					tr = l.GetValue()
				}
			}
			if c == config && tr == tier {
				return m.GetCounter().GetValue(), true
			}
		}
		return 0, false
	}
	checked := 0
	for _, c := range rep.Configs {
		for _, ts := range c.Tiers {
			for name, want := range map[string]uint64{"kvtier_tier_hit_blocks_total": ts.Hits, "kvtier_tier_written_blocks_total": ts.Offloaded,
				"kvtier_tier_loaded_blocks_total": ts.Onboarded} {
				got, ok := series(name, c.Name, ts.Tier.String())
				if !ok || got != float64(want) {
					t.Errorf("%s{config=%s,tier=%s} = %v (present %v), the report says %d", name, c.Name, ts.Tier, got, ok, want)
				}
				checked++
			}
		}
	}
	if checked < 9 {
		t.Fatalf("only %d series checked", checked)
	}
}

// TestEventsFlag: with -events the demo publishes each configuration's KV
// events on the endpoint; a subscriber decodes them.
//
// The router binds; the demo's publisher, given a named host, dials it
// and, as any ZMQ PUB, sends the connection only the batches published
// after its subscription reached it (ZMQ's slow joiner). The small trace
// replays in some tens of milliseconds, and under load a run could end
// before the join did: the subscriber got nothing, and the test failed
// (about 1 run in 300) with nothing wrong in the demo. A run could also
// end after its batches were written to the subscriber's connection but
// before the subscriber read them (Close sends the queued batches before
// it returns), and the test, which stopped at the demo's end, failed then
// too. So batches are read after the demo ends, and a run that delivered
// no GPU BlockStored is run again, up to 5 times: a demo that publishes
// none, or none decodable, fails every run.
func TestEventsFlag(t *testing.T) {
	path, _ := smallTrace(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const runs = 5
	for i := range runs {
		if eventsFlagRun(ctx, t, path) {
			return
		}
		t.Logf("run %d: no GPU BlockStored with 256 tokens a block arrived (the subscription may have joined too late)", i+1)
	}
	t.Fatalf("no GPU BlockStored with 256 tokens a block arrived in %d runs of the demo", runs)
}

// eventsFlagRun runs the demo with -events once and reports whether a
// subscriber got a GPU BlockStored with 256 tokens a block, read until 2
// s after the demo returned (the batches it sent before it returned
// are on the subscriber's connection by then).
func eventsFlagRun(ctx context.Context, t *testing.T, path string) bool {
	t.Helper()
	sub, err := events.SubscribeListen(ctx, "tcp://127.0.0.1:0", "kv@kvtier-demo-0@")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-trace", path, "-configs", "pinned", "-plot", "", "-events", sub.Addr(),
			"-gpu-blocks", "64", "-pinned-blocks", "256", "-block-tokens", "256", "-progress=false"}, io.Discard, io.Discard, false)
	}()
	got := make(chan struct{})
	go func() {
		for {
			_, f, err := sub.Recv()
			if err != nil {
				return
			}
			if b, err := events.DecodeBatch(f.Payload); err == nil {
				for _, e := range b.Events {
					if e.Kind == events.BlockStored && e.Medium == events.MediumGPU && len(e.Tokens) == len(e.Hashes)*256 {
						close(got)
						return
					}
				}
			}
		}
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
		return true
	case <-time.After(2 * time.Second):
		return false
	case <-ctx.Done():
		return false
	}
}
