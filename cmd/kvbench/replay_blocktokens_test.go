package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/trace"
)

// TestReplayBlockTokens: -trace-block-tokens reaches the replay suite. A 16-token
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
	rp := replay16(t, path, []byte(body)).Replay
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

// TestReplayPoolTooSmallIsSkipped: a pool that cannot hold what one call of
// a path allocates (a request of more blocks than the pool, or a batch of 8
// requests of more new blocks) is reported as skipped, saying why, and the
// other pools are still measured. Before, the whole suite failed with
// "not enough free blocks" on any such trace: a 16-token-block trace of
// ordinary prompts (8 requests of 200 blocks against 1,024), or one prompt
// longer than 1,024 blocks.
func TestReplayPoolTooSmallIsSkipped(t *testing.T) {
	for _, tc := range []struct {
		name string
		reqs []int // blocks of each request, all distinct ids
		path string
	}{
		{"batch", []int{200, 200, 200, 200, 200, 200, 200, 200}, "manager_batch8"},
		{"request", []int{1100, 3}, "direct"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "t.jsonl")
			var body bytes.Buffer
			id := 0
			for i, n := range tc.reqs {
				ids := make([]int, n)
				for j := range ids {
					ids[j] = id
					id++
				}
				line, err := json.Marshal(map[string]any{"timestamp": i, "input_length": 16 * n, "output_length": 1, "hash_ids": ids})
				if err != nil {
					t.Fatal(err)
				}
				body.Write(append(line, '\n'))
			}
			rep := replay16(t, path, body.Bytes())
			rp := rep.Replay
			if rp == nil || len(rp.Pools) != len(replayPools) {
				t.Fatalf("replay result %+v, want %d pools", rp, len(replayPools))
			}
			small, big := rp.Pools[0], rp.Pools[len(rp.Pools)-1]
			if small.PoolBlocks != 1024 || !strings.Contains(small.Skipped, tc.path) || !strings.Contains(small.Skipped, "not enough free blocks") {
				t.Errorf("pool %d: skipped %q, want it skipped naming %s and the missing blocks", small.PoolBlocks, small.Skipped, tc.path)
			}
			if big.Skipped != "" || big.BlocksPerS["direct"] <= 0 || big.BlocksPerS["manager_batch8"] <= 0 {
				t.Errorf("pool %d: %+v, want it measured", big.PoolBlocks, big)
			}
			for _, tg := range rep.Targets {
				if strings.HasSuffix(tg.Name, "@1024") && tg.Status != "N/A" {
					t.Errorf("target %s of the skipped pool: %s, want N/A", tg.Name, tg.Status)
				}
			}
			var human bytes.Buffer
			if err := writeHuman(&human, rep); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(human.String(), "skipped") {
				t.Errorf("human report says nothing of the skipped pool:\n%s", human.String())
			}
		})
	}
}

// replay16 writes body to path, runs kvbench's quick replay suite on it as
// a trace of 16-token ids and returns the JSON report.
func replay16(t *testing.T, path string, body []byte) *Report {
	t.Helper()
	if err := os.WriteFile(path, body, 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-json", "-quick", "-suite", "replay", "-trace", path, "-trace-block-tokens", "16"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	return &rep
}

// TestReplayPartialBlockNeverHits: a prompt's partly filled last block is
// allocated but never cached (the pool caches full blocks only), so a
// request repeated exactly hits its full blocks and not that one: 2 of 3
// here, where cachesim (the trace suite) counts all 3. The note under the
// table says so; it did not, and the replay's hit ratios read as lower
// than the trace suite's on the same trace with no reason given.
func TestReplayPartialBlockNeverHits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "partial.jsonl")
	line := `{"timestamp": 0, "input_length": 40, "output_length": 1, "hash_ids": [0, 1, 2]}` + "\n"
	rp := replay16(t, path, []byte(line+line)).Replay
	if rp == nil || rp.Blocks != 6 || len(rp.Pools) == 0 {
		t.Fatalf("replay result %+v, want 6 blocks a pass", rp)
	}
	for _, p := range rp.Pools {
		for _, path := range []string{"direct", "manager"} {
			if got := p.HitRatio[path]; got != 2.0/6 {
				t.Errorf("pool %d, %s: hit ratio %v, want 2/6 (the partial third block never hits)", p.PoolBlocks, path, got)
			}
		}
	}
	if !strings.Contains(rp.Note, "partly filled last block") {
		t.Errorf("the note does not say a partly filled last block never hits: %q", rp.Note)
	}
}

// TestReplayHugeIDsDistinct: two hash ids stand for two different prompts
// however large they are. Token t of id h was splitmix64(h*B+t) for every
// id, and h*B wraps past 2^64: at 512 tokens an id, ids 0 and 2^55 (or
// 2^63-1 and 2^62-1) gave the same prompt, and a trace with no reuse at all
// replayed at 50% hits. Ids below 2^64/B keep their tokens.
func TestReplayHugeIDsDistinct(t *testing.T) {
	for _, pair := range [][2]int64{{0, 1 << 55}, {1<<63 - 1, 1<<62 - 1}, {1 << 62, 1<<62 + 1<<55}} {
		a := trace.Request{InputLength: 512, HashIDs: []int64{pair[0]}}
		b := trace.Request{InputLength: 512, HashIDs: []int64{pair[1]}}
		if pa, pb := replayPrompt(nil, a, 512), replayPrompt(nil, b, 512); slices.Equal(pa, pb) {
			t.Errorf("ids %d and %d give the same 512-token prompt", pair[0], pair[1])
		}
	}
	// Below 2^64/B the tokens are those documented: splitmix64(h*B+t).
	small := trace.Request{InputLength: 3, HashIDs: []int64{1<<55 - 1}}
	want := []int64{}
	for tok := range 3 {
		want = append(want, int64(splitmix64(uint64(1<<55-1)*512+uint64(tok))%replayVocab))
	}
	if got := replayPrompt(nil, small, 512); !slices.Equal(got, want) {
		t.Errorf("id 2^55-1: tokens %v, want %v", got, want)
	}
}

// TestReplayQuickSaysFirstRequests: -quick replays only the first 600
// requests of a longer trace, and the result's name says so. It named the
// file alone beside "600 requests", which read as the trace's size.
func TestReplayQuickSaysFirstRequests(t *testing.T) {
	var b strings.Builder
	for i := range 650 {
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": 20, "output_length": 1, "hash_ids": [%d, %d]}`+"\n", i, i%7, 1000+i)
	}
	path := filepath.Join(t.TempDir(), "t.jsonl")
	rp := replay16(t, path, []byte(b.String())).Replay
	if rp.Requests != 600 || !strings.Contains(rp.Trace, "first 600 of 650 requests") {
		t.Errorf("trace %q, %d requests: want 600 and a name saying they are the first 600 of 650", rp.Trace, rp.Requests)
	}
}

// TestReplayTooShortToTime: a trace whose pass allocates a few blocks (one
// request of 13 here) is replayed and its figures printed, but a pass of
// microseconds times cold caches and the clock, not the paths: its targets
// are N/A and the table says why. They were judged: a one-request trace
// reported the Manager at 9.9x the direct cost, MISS.
func TestReplayTooShortToTime(t *testing.T) {
	path := filepath.Join(t.TempDir(), "one.jsonl")
	rep := replay16(t, path, []byte(`{"timestamp": 0, "input_length": 200, "output_length": 1, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]}`+"\n"))
	rp := rep.Replay
	if rp.Blocks != 13 || !rp.TooShort {
		t.Fatalf("blocks %d, too short %v: want 13 and true", rp.Blocks, rp.TooShort)
	}
	for _, tg := range rep.Targets {
		if strings.HasPrefix(tg.Name, "replay_") && tg.Status != "N/A" {
			t.Errorf("target %s: %s, want N/A", tg.Name, tg.Status)
		}
	}
	var human bytes.Buffer
	if err := writeHuman(&human, rep); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(human.String(), "too short to time") {
		t.Errorf("the table does not say the pass is too short to time:\n%s", human.String())
	}
	// The embedded sample, which -quick replays, is long enough.
	r, err := runReplay(traceFile{}, true, metricsSink{})
	if err != nil {
		t.Fatal(err)
	}
	if r.TooShort {
		t.Errorf("the embedded sample (%d blocks a pass) is called too short to time", r.Blocks)
	}
}
