package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/scheduler"
)

// TestRouteKeepsEveryRequestOnce: both routings send each request to exactly
// one replica, in trace order, and prefix affinity keeps a conversation's
// turns (same first blocks) on one replica.
func TestRouteKeepsEveryRequestOnce(t *testing.T) {
	_, reqs := smallTrace(t)
	for _, r := range []routing{roundRobin, prefixAffinity} {
		parts := route(reqs, 3, r)
		n := 0
		for _, p := range parts {
			n += len(p)
			for i := 1; i < len(p); i++ {
				if p[i].Timestamp < p[i-1].Timestamp {
					t.Fatalf("%s: a replica's requests are out of order", r)
				}
			}
		}
		if n != len(reqs) {
			t.Fatalf("%s: %d requests routed of %d", r, n, len(reqs))
		}
	}
	where := map[string]int{}
	for node, p := range route(reqs, 3, prefixAffinity) {
		for _, q := range p {
			key := ""
			for _, id := range q.HashIDs[:min(affinityBlocks, len(q.HashIDs))] {
				key += "," + string(rune(id))
			}
			if prev, ok := where[key]; ok && prev != node {
				t.Fatal("one prefix sent to two replicas under prefix affinity")
			}
			where[key] = node
		}
	}
}

// TestMultiNode: -nodes runs the replicas on one clock and prints a column
// per routing; with a Redis server ($KVTIER_REDIS, CI), the shared tier
// serves round-robin replicas prefixes another replica computed.
func TestMultiNode(t *testing.T) {
	path, _ := smallTrace(t)
	args := []string{"-trace", path, "-nodes", "3", "-plot", "", "-gpu-blocks", "64", "-pinned-blocks", "256", "-block-tokens", "256"}
	addr := os.Getenv("KVTIER_REDIS")
	if addr != "" {
		args = append(args, "-redis", addr)
	} else if os.Getenv("KVTIER_REQUIRE_REDIS") != "" {
		t.Fatal("KVTIER_REQUIRE_REDIS is set (CI) but KVTIER_REDIS is not")
	}
	var out, errOut bytes.Buffer
	if err := run(context.Background(), args, &out, &errOut, false); err != nil {
		t.Fatalf("%v\n%s", err, errOut.String())
	}
	s := out.String()
	t.Log(s)
	for _, want := range []string{"round-robin", "prefix-affinity", "served from shared tier", "TTFT p50"} {
		if !strings.Contains(s, want) {
			t.Fatalf("output lacks %q", want)
		}
	}
	if addr == "" {
		t.Skip(`the shared tier needs Redis: run eval "$(.ci/redis.sh start)" first (CI does)`)
	}
	if !strings.Contains(s, "round-robin + shared") {
		t.Fatal("no shared-tier column with -redis")
	}
	var rr, shared fleetOutcome
	o, err := parseFlags(args, &errOut)
	if err != nil {
		t.Fatal(err)
	}
	reqs, _, err := loadTrace(o)
	if err != nil {
		t.Fatal(err)
	}
	o.timeScale = 1
	if rr, err = replayFleet(context.Background(), o, reqs, roundRobin, false, "test-"+t.Name()); err != nil {
		t.Fatal(err)
	}
	if shared, err = replayFleet(context.Background(), o, reqs, roundRobin, true, "test-"+t.Name()); err != nil {
		t.Fatal(err)
	}
	if rr.res.RemoteTokens != 0 || shared.res.RemoteTokens == 0 {
		t.Fatalf("remote tokens: %d without the shared tier, %d with it", rr.res.RemoteTokens, shared.res.RemoteTokens)
	}
	if shared.res.PrefillTokens >= rr.res.PrefillTokens {
		t.Fatalf("the shared tier computed %d prefill tokens, no fewer than %d without it", shared.res.PrefillTokens, rr.res.PrefillTokens)
	}
}

// TestFleetHeaderTraffic: the header claims N times the single-node traffic
// only when run divided the automatic scale by N; with -time-scale the
// arrivals are the single-node run's at that scale.
func TestFleetHeaderTraffic(t *testing.T) {
	path, reqs := smallTrace(t)
	base := []string{"-trace", path, "-nodes", "2", "-route", "rr", "-plot", "", "-gpu-blocks", "64", "-pinned-blocks", "256", "-block-tokens", "256"}
	auto := timeScaleFor(offeredWork(reqs, scheduler.DefaultCostModel(), 0), defaultLoad) / 2
	for _, c := range []struct {
		args    []string
		want    string
		notWant string
	}{
		{[]string{"-time-scale", "1"}, "arrivals at the trace's own rate (-time-scale): the traffic one GPU gets in a single-node run at this scale, split across 2 replicas", "times the traffic"},
		{nil, fmt.Sprintf("arrivals at %s (the time scale chosen for -load %g, divided by 2): the fleet gets 2 times the traffic", arrivalRate(auto), defaultLoad), ""},
	} {
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), append(base, c.args...), &stdout, &stderr, false); err != nil {
			t.Fatalf("%q: %v\n%s", c.args, err, stderr.String())
		}
		line := strings.SplitN(stdout.String(), "\n", 3)[1]
		if !strings.Contains(line, c.want) || (c.notWant != "" && strings.Contains(line, c.notWant)) {
			t.Errorf("%q: header %q, want %q", c.args, line, c.want)
		}
	}
}

// fakeFlusher and fakeFreezer log their calls in order.
type fakeFlusher struct {
	log *[]string
	id  string
	err error
}

func (f fakeFlusher) Flush(context.Context) error {
	*f.log = append(*f.log, "flush "+f.id)
	return f.err
}

type fakeFreezer struct{ log *[]string }

func (f fakeFreezer) Freeze() error { *f.log = append(*f.log, "freeze"); return nil }

// TestFlushThenFreeze: the fleet freezes its metrics only after every
// replica's cache is flushed (the last writes of -sync=false land first),
// and not at all when a flush fails.
func TestFlushThenFreeze(t *testing.T) {
	var log []string
	caches := []flusher{fakeFlusher{log: &log, id: "0"}, fakeFlusher{log: &log, id: "1"}}
	if err := flushThenFreeze(context.Background(), caches, fakeFreezer{&log}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"flush 0", "flush 1", "freeze"}; !slices.Equal(log, want) {
		t.Errorf("calls %q, want %q", log, want)
	}
	log = nil
	boom := errors.New("boom")
	caches = []flusher{fakeFlusher{log: &log, id: "0", err: boom}, fakeFlusher{log: &log, id: "1"}}
	if err := flushThenFreeze(context.Background(), caches, fakeFreezer{&log}); !errors.Is(err, boom) || !slices.Equal(log, []string{"flush 0"}) {
		t.Errorf("a failed flush: %v, calls %q", err, log)
	}
	if err := flushThenFreeze(context.Background(), nil, nil); err != nil {
		t.Errorf("no caches, no metrics: %v", err)
	}
}
