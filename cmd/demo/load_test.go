package main

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/scheduler"
	"github.com/kvtier/kvtier/trace"
)

// TestDefaultLoad: with no -time-scale the demo stretches the embedded sample
// to the default load, which is below saturation; the old fixed scale of 3
// offered the GPU more compute than it has.
func TestDefaultLoad(t *testing.T) {
	cost := scheduler.DefaultCostModel()
	reqs := trace.Sample()
	w := offeredWork(reqs, cost, 0)
	if w.Span != 200_999*time.Millisecond || w.Prefill <= 0 || w.Decode <= 0 {
		t.Fatalf("offered work %+v", w)
	}
	var prefill time.Duration
	for _, r := range reqs {
		prefill += cost.PrefillCompute(r.InputLength, 0)
	}
	if prefill != w.Prefill {
		t.Errorf("offered prefill %v, want the sum of the prompts' PrefillCompute %v", w.Prefill, prefill)
	}
	if l := w.Load(3); l < 1 {
		t.Errorf("the old default scale 3 offers a load of %.2f: the regression this test guards against is gone?", l)
	}
	o, err := parseFlags(nil, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	scale := timeScaleFor(w, o.load)
	if got := w.Load(scale); math.Abs(got-defaultLoad) > 1e-9 || defaultLoad < 0.7 || defaultLoad > 0.9 {
		t.Errorf("default scale %.3f gives a load of %.3f; want %.2f, within [0.7, 0.9]", scale, got, defaultLoad)
	}
	if scale <= 3 {
		t.Errorf("default scale %.3f is not slower than the old overloaded 3", scale)
	}
	// Capped outputs mean less decode; a trace arriving at once has no rate.
	if capped := offeredWork(reqs, cost, 1); capped.Decode != 0 || capped.Prefill != w.Prefill {
		t.Errorf("-max-output 1: %+v", capped)
	}
	burst := []trace.Request{{Timestamp: 5, InputLength: 10, OutputLength: 1, HashIDs: []int64{1}}}
	if s := timeScaleFor(offeredWork(burst, cost, 0), 0.8); s != 1 {
		t.Errorf("one request: scale %v, want 1", s)
	}
}

// TestRunChoosesScale: run picks the scale from the trace unless
// -time-scale is given, says so, and reports the load and the prefill
// compute each tier saved.
func TestRunChoosesScale(t *testing.T) {
	path, reqs := smallTrace(t)
	w := offeredWork(reqs, scheduler.DefaultCostModel(), 0)
	for _, c := range []struct {
		args  []string
		scale float64
		says  string
	}{
		{[]string{"-load", "0.5"}, timeScaleFor(w, 0.5), "(chosen for -load 0.5)"},
		{[]string{"-time-scale", "2"}, 2, "(-time-scale)"},
	} {
		// smallArgs sets -time-scale 1; a later flag wins, and 0 is "choose".
		args := append(smallArgs(path), "-plot", "", "-json", "-", "-disk-dir", t.TempDir(), "-time-scale", "0")
		args = append(args, c.args...)
		var stdout, stderr bytes.Buffer
		if err := run(context.Background(), args, &stdout, &stderr, false); err != nil {
			t.Fatalf("%v: %v\n%s", c.args, err, stderr.String())
		}
		var rep jsonReport
		if err := json.Unmarshal(stdout.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		if math.Abs(rep.TimeScale-c.scale) > 1e-9 || math.Abs(rep.OfferedLoad-w.Load(c.scale)) > 1e-9 {
			t.Errorf("%v: scale %v load %v, want %v and %v", c.args, rep.TimeScale, rep.OfferedLoad, c.scale, w.Load(c.scale))
		}
		table := stderr.String()
		for _, want := range []string{c.says, "offered GPU load", "hit ratio", "prefill compute saved", "  by GPU hits", "  by pinned hits", "  by disk hits", "GPU busy", "TTFT p50"} {
			if !strings.Contains(table, want) {
				t.Errorf("%v: the table lacks %q:\n%s", c.args, want, table)
			}
		}
	}
}

// TestDescribeArrivals: the header says how arrivals relate to the trace's
// rate in words that read right whichever way the scale goes, and says so
// when a trace has no rate to scale. Before, a trace whose requests all
// arrive at once read "arrivals at 1/1 of the trace's rate (chosen for -load
// 0.8)" over "offered GPU load 0.00", and a scale below 1 "1/0.331 of the
// trace's rate" for three times its rate.
func TestDescribeArrivals(t *testing.T) {
	w := offered{Prefill: 2 * time.Second, Decode: time.Second}
	got := w.describe(1, 0.8, true)
	if !strings.Contains(got, "arrives at once") || strings.Contains(got, "chosen for -load") || strings.Contains(got, "load 0.00") {
		t.Errorf("no span: %q, want it to say every request arrives at once and no load is chosen", got)
	}
	w.Span = 10 * time.Second
	for _, c := range []struct {
		scale float64
		want  string
	}{{0.5, "2x the trace's rate"}, {4, "1/4 of the trace's rate"}, {1, "the trace's own rate"}} {
		if got := w.describe(c.scale, 0.8, true); !strings.Contains(got, c.want) || !strings.Contains(got, "(chosen for -load 0.8)") {
			t.Errorf("scale %v: %q, want %q", c.scale, got, c.want)
		}
	}
}
