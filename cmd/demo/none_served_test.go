package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNoRequestServed: when every request is rejected (each needs more KV
// than the GPU holds), the hit ratio, OPT and TTFT rows have nothing to
// measure and print "-", as hit ratio / OPT does, in the single-node table
// and the fleet's (-nodes). They printed 0.00% and 0 ms: a ratio over zero
// prompt tokens and percentiles of no TTFT.
func TestNoRequestServed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "long.jsonl")
	line := `{"timestamp": 0, "input_length": 1536, "output_length": 1, "hash_ids": [0, 1, 2]}` + "\n"
	if err := os.WriteFile(path, []byte(line+line), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run(context.Background(), []string{"-trace", path, "-gpu-blocks", "2", "-configs", "gpu", "-plot", ""}, &out, io.Discard, false); err != nil {
		t.Fatal(err)
	}
	rows := map[string]string{}
	for _, l := range strings.Split(out.String(), "\n") {
		if i := strings.LastIndex(l, "  "); i > 0 && len(l) > 34 {
			rows[strings.TrimSpace(l[:34])] = strings.TrimSpace(l[i:])
		}
	}
	if rows["requests served"] != "0" || rows["rejected requests (never fit)"] != "2" {
		t.Fatalf("precondition: served %q, rejected %q; want 0 and 2:\n%s", rows["requests served"], rows["rejected requests (never fit)"], out.String())
	}
	for _, r := range []string{"hit ratio", "OPT at total capacity", "hit ratio / OPT", "TTFT p50", "TTFT p90", "TTFT p99"} {
		if rows[r] != "-" {
			t.Errorf("row %q: %q, want - (nothing served):\n%s", r, rows[r], out.String())
		}
	}

	out.Reset()
	if err := run(context.Background(), []string{"-trace", path, "-gpu-blocks", "2", "-nodes", "2"}, &out, io.Discard, false); err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(out.String(), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || (!strings.HasPrefix(strings.TrimSpace(l), "hit ratio") && !strings.HasPrefix(strings.TrimSpace(l), "TTFT")) {
			continue
		}
		if cells := f[len(f)-2:]; cells[0] != "-" || cells[1] != "-" {
			t.Errorf("fleet row %q: want - in both columns (nothing served)", strings.TrimSpace(l))
		}
	}
}
