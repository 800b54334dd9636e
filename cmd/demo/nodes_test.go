package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
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
