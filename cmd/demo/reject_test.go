package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/trace"
)

// writeTrace writes reqs as a JSONL trace and returns its path.
func writeTrace(t *testing.T, reqs []trace.Request) string {
	t.Helper()
	var b bytes.Buffer
	for _, r := range reqs {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	path := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// withOversize returns reqs with, after request at, one whose 20,000-token
// prompt no GPU of smallArgs (64 blocks of 128 tokens: 8,192) can hold.
func withOversize(reqs []trace.Request, at int) []trace.Request {
	ids := make([]int64, 40)
	for i := range ids {
		ids[i] = 1<<40 + int64(i)
	}
	big := trace.Request{Timestamp: reqs[at].Timestamp, InputLength: 20_000, OutputLength: 4, HashIDs: ids}
	return slices.Insert(slices.Clone(reqs), at+1, big)
}

// runJSON runs the demo with args plus -json - and returns the report and
// the table (stderr).
func runJSON(t *testing.T, args []string) (jsonReport, string) {
	t.Helper()
	var out, table bytes.Buffer
	if err := run(context.Background(), append(args, "-plot", "", "-json", "-"), &out, &table, false); err != nil {
		t.Fatalf("%v\n%s", err, table.String())
	}
	var rep jsonReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	return rep, table.String()
}

// TestRejectedRequest: a request that can never fit in the GPU is rejected
// and the run serves the others, exactly as it serves the trace without it:
// the same served figures, hit ratio and OPT (over the served requests).
// The table and the JSON count it. Before, the run stopped with
// scheduler.ErrUnschedulable.
func TestRejectedRequest(t *testing.T) {
	_, reqs := smallTrace(t)
	flags := func(path string) []string { return append(smallArgs(path), "-configs", "gpu,pinned") }
	base, baseTable := runJSON(t, flags(writeTrace(t, reqs)))
	got, table := runJSON(t, flags(writeTrace(t, withOversize(reqs, len(reqs)/2))))
	for i, c := range got.Configs {
		b := base.Configs[i]
		if c.RejectedRequests != 1 || c.RejectedPromptTokens != 20_000 {
			t.Errorf("%s: rejected %d requests (%d prompt tokens), want 1 (20,000)", c.Name, c.RejectedRequests, c.RejectedPromptTokens)
		}
		if c.Requests != len(reqs) || c.PromptTokens != b.PromptTokens || c.HitRatio != b.HitRatio ||
			c.GPUTokens != b.GPUTokens || c.PinnedTokens != b.PinnedTokens || c.PrefillTokens != b.PrefillTokens {
			t.Errorf("%s: served %+v\nwithout the oversize request %+v", c.Name, c, b)
		}
		if c.OPTHitRatio != b.OPTHitRatio {
			t.Errorf("%s: OPT %.4f, %.4f without the oversize request: not over the same requests as the hit ratio", c.Name, c.OPTHitRatio, b.OPTHitRatio)
		}
	}
	for _, want := range []string{"1 request can never fit in the GPU (prompt + output past its 8,192 tokens)",
		"rejected requests (never fit)", "requests served", "prompt tokens (served requests)", "over the served requests"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
	if strings.Contains(baseTable, "rejected") {
		t.Errorf("a run that rejected nothing shows rejections:\n%s", baseTable)
	}
}

// TestFleetAtOnceAndRejected: the multi-node header says when every request
// arrives at once, as the single-node one does, instead of "chosen for
// -load"; a request that never fits is rejected there too and counted.
func TestFleetAtOnceAndRejected(t *testing.T) {
	_, reqs := smallTrace(t)
	reqs = reqs[:12]
	for i := range reqs {
		reqs[i].Timestamp = 0
	}
	path := writeTrace(t, withOversize(reqs, 3))
	args := []string{"-trace", path, "-nodes", "2", "-route", "rr", "-plot", "", "-gpu-blocks", "64", "-pinned-blocks", "256",
		"-block-tokens", "128", "-vocab", "5000"}
	var out, stderr bytes.Buffer
	if err := run(context.Background(), args, &out, &stderr, false); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	s := out.String()
	for _, want := range []string{"every request arrives at once", "1 request can never fit in the GPU", "rejected requests (never fit)"} {
		if !strings.Contains(s, want) {
			t.Errorf("output lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "chosen for -load") {
		t.Errorf("a trace with no arrival rate reads as scaled for -load:\n%s", s)
	}
	if i := strings.Index(s, "rejected requests (never fit)"); i >= 0 {
		if line := strings.Fields(strings.SplitN(s[i:], "\n", 2)[0]); line[len(line)-1] != "1" {
			t.Errorf("rejected row %q, want 1", line)
		}
	}
}
