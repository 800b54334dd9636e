package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestReplayBlockTokens: -block-tokens reaches the replay suite. A 16-token
// trace is read at 16 tokens a hash id, each id stands for 16 tokens of the
// prompt, and the pools' blocks hold 16 tokens, so a request sharing its first
// two ids with an earlier one hits two blocks and one sharing only its first id
// hits one. Before, the suite re-read the file at 512 and failed.
func TestReplayBlockTokens(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t16.jsonl")
	body := `{"timestamp": 0, "input_length": 40, "output_length": 1, "hash_ids": [0, 1, 2]}
{"timestamp": 5, "input_length": 40, "output_length": 1, "hash_ids": [0, 1, 3]}
{"timestamp": 9, "input_length": 40, "output_length": 1, "hash_ids": [0, 4, 5]}
`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-json", "-quick", "-suite", "replay", "-trace", path, "-block-tokens", "16"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	rp := rep.Replay
	if rp == nil || rp.BlockTokens != 16 || rp.Requests != 3 || rp.Blocks != 9 || len(rp.Pools) == 0 {
		t.Fatalf("replay result %+v, want 3 requests, 9 blocks of 16 tokens", rp)
	}
	for _, p := range rp.Pools {
		for _, path := range []string{"direct", "manager"} {
			if got := p.HitRatio[path]; got != 3.0/9 {
				t.Errorf("pool %d, %s: hit ratio %v, want 3/9 (2 + 1 shared 16-token blocks)", p.PoolBlocks, path, got)
			}
		}
	}
}

// TestReplaySampleBlockTokens: without -trace the replay suite runs on the
// embedded sample at its own 512 tokens a hash id.
func TestReplaySampleBlockTokens(t *testing.T) {
	r, err := runReplay(traceFile{blockTokens: 16}, true, metricsSink{})
	if err != nil {
		t.Fatal(err)
	}
	if r.BlockTokens != 512 || r.Requests != 600 {
		t.Fatalf("sample: %d requests at %d tokens a block, want 600 at 512", r.Requests, r.BlockTokens)
	}
}
