package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/kvtier/kvtier/trace"
)

// TestReadmissionsAreNoHits: in a trace whose requests share no block, no
// request can find another's KV, and OPT finds nothing. Preemptions (a GPU
// of a few long prompts) make readmitted sequences find their own KV again;
// the table's hit ratio, served-from rows and prefill compute saved, which
// it compares with OPT and with a run without cache, must not count those.
func TestReadmissionsAreNoHits(t *testing.T) {
	var b bytes.Buffer
	for i := range 24 {
		n := 8 // 8 blocks of 128 tokens, the last one partial
		r := trace.Request{Timestamp: int64(i), InputLength: 128*n - 7, OutputLength: 200}
		for j := range n {
			r.HashIDs = append(r.HashIDs, int64(i*n+j))
		}
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(append(line, '\n'))
	}
	path := filepath.Join(t.TempDir(), "disjoint.jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, stderr bytes.Buffer
	args := []string{"-trace", path, "-trace-block-tokens", "128", "-block-tokens", "128", "-configs", "gpu,pinned",
		"-gpu-blocks", "40", "-pinned-blocks", "64", "-time-scale", "1", "-vocab", "5000", "-plot", "", "-json", "-"}
	if err := run(context.Background(), args, &out, &stderr, false); err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var rep jsonReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	preempted := false
	for _, c := range rep.Configs {
		preempted = preempted || c.Preemptions > 0
		if c.OPTHitRatio != 0 {
			t.Errorf("%s: OPT %v on a trace with no shared block", c.Name, c.OPTHitRatio)
		}
		if hits := c.GPUTokens + c.PinnedTokens + c.DiskTokens; c.HitRatio != 0 || hits != 0 || c.PrefillSavedS.total() != 0 {
			t.Errorf("%s: %d preemptions; hit ratio %.2f%%, %d tokens served (gpu %d, pinned %d), %.3f s prefill saved; want 0 on a trace with no shared block",
				c.Name, c.Preemptions, 100*c.HitRatio, hits, c.GPUTokens, c.PinnedTokens, c.PrefillSavedS.total())
		}
	}
	if !preempted {
		t.Fatal("no preemption: the test shows nothing")
	}
}
