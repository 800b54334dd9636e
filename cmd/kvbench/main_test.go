package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"io/fs"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestQuickJSON runs the command as CI does (-json -quick) in-process and checks
// that the output is one JSON object whose every number is positive. The only
// exception is the actor path while this binary is built without it
// (actor_built false): its fields are then 0 by contract and the note says so.
func TestQuickJSON(t *testing.T) {
	var out bytes.Buffer
	dir := t.TempDir()
	peak, stop := watchDiskUse(dir)
	err := run(context.Background(), []string{"-json", "-quick", "-dir", dir}, &out, io.Discard)
	stop()
	if err != nil {
		t.Fatal(err)
	}
	// CI runs -quick in a shared temp dir: the disk tiers it opens reserve
	// their whole capacity, so it must stay small.
	const limit = 5 << 28 // 1.25 GiB: the reload's disk tier and the disk suite's
	t.Logf("-quick reserved at most %d MiB of its dir", *peak>>20)
	if *peak > limit {
		t.Errorf("-quick reserved %d MiB of its dir at once, want at most %d MiB", *peak>>20, limit>>20)
	}
	dec := json.NewDecoder(bytes.NewReader(out.Bytes()))
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out.String())
	}
	if dec.More() {
		t.Fatalf("output holds more than one JSON value:\n%s", out.String())
	}

	var rep Report
	strict := json.NewDecoder(bytes.NewReader(out.Bytes()))
	strict.DisallowUnknownFields()
	if err := strict.Decode(&rep); err != nil {
		t.Fatalf("output does not decode into Report: %v", err)
	}
	if rep.Alloc == nil || rep.Copy == nil || rep.Copy.Disk == nil || rep.Copy.Reload == nil || rep.Trace == nil {
		t.Fatalf("a suite is missing: %+v", rep)
	}
	actorBuilt := rep.Alloc.ActorBuilt
	if !actorBuilt && !strings.Contains(rep.Alloc.Note, "actor path: not built") {
		t.Errorf("actor path not built but the note does not say so: %q", rep.Alloc.Note)
	}

	// exempt says whether a zero at path is allowed.
	exempt := func(path string, parent map[string]any) bool {
		if actorBuilt {
			return false
		}
		if strings.HasPrefix(path, "alloc.actor_") && path != "alloc.actor_batch" && path != "alloc.actor_parallel_clients" {
			return true
		}
		return strings.HasPrefix(path, "targets[") && strings.HasSuffix(path, ".value") && parent["name"] == "actor_over_direct_cost"
	}
	var walk func(path string, v any, parent map[string]any)
	walk = func(path string, v any, parent map[string]any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				walk(strings.TrimPrefix(path+"."+k, "."), e, v)
			}
		case []any:
			for i, e := range v {
				walk(path+"["+strconv.Itoa(i)+"]", e, parent)
			}
		case float64:
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Errorf("%s = %v", path, v)
			} else if v <= 0 && !exempt(path, parent) {
				t.Errorf("%s = %v, want > 0", path, v)
			}
		}
	}
	walk("", doc, nil)

	if want := float64(stemBlocks) / seqBlocks; math.Abs(rep.Alloc.HitFraction-want) > 1e-9 {
		t.Errorf("hit fraction %v, want %v: the stems should hit and every tail miss", rep.Alloc.HitFraction, want)
	}
	for _, c := range rep.Trace.Capacities {
		for name, h := range c.HitRatio {
			if h > c.OPTHitRatio+1e-12 || c.OPTHitRatio > c.InfiniteHitRatio+1e-12 {
				t.Errorf("capacity %d: %s %v, OPT %v, infinite %v: want policy <= OPT <= infinite",
					c.CapacityBlocks, name, h, c.OPTHitRatio, c.InfiniteHitRatio)
			}
		}
	}
}

func TestParseFlags(t *testing.T) {
	o, err := parseFlags([]string{"-suite", "trace,alloc", "-capacity", "8, 64"}, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if !o.suites[suiteTrace] || !o.suites[suiteAlloc] || o.suites[suiteCopy] {
		t.Errorf("suites %v, want alloc and trace", o.suites)
	}
	if len(o.capacities) != 2 || o.capacities[0] != 8 || o.capacities[1] != 64 {
		t.Errorf("capacities %v, want [8 64]", o.capacities)
	}
	for _, bad := range [][]string{
		{"-suite", "disk"},
		{"-capacity", "0"},
		{"-capacity", "1k"},
		{"extra"},
	} {
		if _, err := parseFlags(bad, &bytes.Buffer{}); err == nil {
			t.Errorf("parseFlags(%q) accepted bad input", bad)
		}
	}
}

// TestHumanTraceOnly checks the human output of one suite: it names OPT and
// prints a PASS or MISS per capacity for the default policy against the best
// classic one, and its memory per id.
func TestHumanTraceOnly(t *testing.T) {
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-suite", "trace", "-capacity", "256,100000"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"OPT = Belady's MIN", "adaptive_over_best_classic@256", "adaptive_over_best_classic@100000", "adaptive memory: ", "machine: "} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "alloc:") || strings.Contains(s, "copy:") {
		t.Errorf("suites that were not asked for ran:\n%s", s)
	}
}

func TestWorkloadTailsAreFresh(t *testing.T) {
	for _, bt := range []int{blockTokens, longBlockTokens} {
		w := newWorkload(0, 3, bt)
		seen := map[int64]bool{}
		for range 10 {
			p := w.prompt()
			if len(p) != seqBlocks*bt {
				t.Fatalf("%d-token blocks: prompt of %d tokens, want %d", bt, len(p), seqBlocks*bt)
			}
			m := p[stemBlocks*bt]
			if seen[m] {
				t.Fatalf("%d-token blocks: tail marker %d repeated", bt, m)
			}
			seen[m] = true
		}
	}
}

// watchDiskUse samples the bytes the files under dir take on disk (their
// allocated blocks, which a reservation counts) until stop returns, and
// keeps the largest sample in *peak.
func watchDiskUse(dir string) (peak *int64, stop func()) {
	peak = new(int64)
	done, exited := make(chan struct{}), make(chan struct{})
	sample := func() {
		var n int64
		_ = filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return nil // removed under the walk, or a directory
			}
			if fi, err := e.Info(); err == nil {
				if st, ok := fi.Sys().(*syscall.Stat_t); ok {
					n += st.Blocks * 512
				}
			}
			return nil
		})
		*peak = max(*peak, n)
	}
	go func() {
		defer close(exited)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				sample()
			}
		}
	}()
	return peak, func() { close(done); <-exited }
}

// TestHelpExitsZero: -h prints the usage and nothing else, and exits 0, as
// the demo's does. Before, kvbench added "kvbench: flag: help requested" and
// exited 2, as for a bad flag.
func TestHelpExitsZero(t *testing.T) {
	var usage, stderr bytes.Buffer
	err := run(context.Background(), []string{"-h"}, io.Discard, &usage)
	if code := exitCode(err, &stderr); code != 0 || stderr.Len() != 0 {
		t.Errorf("-h: exit %d, stderr %q; want 0 and nothing past the usage", code, stderr.String())
	}
	if !strings.Contains(usage.String(), "-suite") {
		t.Errorf("-h printed no usage: %q", usage.String())
	}
	if code := exitCode(run(context.Background(), []string{"-suite", "disk"}, io.Discard, io.Discard), &stderr); code != 2 || !strings.Contains(stderr.String(), "kvbench: -suite") {
		t.Errorf("bad flag: exit %d, stderr %q; want 2 and the error", code, stderr.String())
	}
}
