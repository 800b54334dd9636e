package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOPTFootnoteConcurrentPrefix: requests that arrive together with the
// same prompt cannot hit each other's blocks, which are not computed yet
// when they are admitted (commit before cache), while OPT replays requests
// one after another and counts those hits. A trace of two identical
// requests at the same time shows it: the run hits nothing and OPT half
// the blocks, with every tier, whatever the policy. The OPT footnote said
// OPT is "the most block hits any policy can get" and nothing of this, so a
// trace of repeated prompts arriving in bursts read as a policy far from
// its optimum.
func TestOPTFootnoteConcurrentPrefix(t *testing.T) {
	path := filepath.Join(t.TempDir(), "twins.jsonl")
	line := `{"timestamp": 0, "input_length": 1024, "output_length": 4, "hash_ids": [0, 1]}` + "\n"
	if err := os.WriteFile(path, []byte(line+line), 0o600); err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	jsonPath := filepath.Join(t.TempDir(), "r.json")
	if err := run(context.Background(), []string{"-trace", path, "-plot", "", "-configs", "gpu", "-json", jsonPath}, &table, io.Discard, false); err != nil {
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
	if c := rep.Configs[0]; c.HitRatio != 0 || c.OPTHitRatio != 0.5 {
		t.Fatalf("precondition: hit ratio %v, OPT %v; want 0 and 0.5 (the twin's two blocks)", c.HitRatio, c.OPTHitRatio)
	}
	if !strings.Contains(table.String(), "arrives while an earlier request still computes") {
		t.Errorf("the OPT footnote does not say a request cannot hit a prefix still being computed:\n%s", table.String())
	}
}
