package main

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/trace"
)

// TestSkipBadLines: -skip-bad-lines, as the demo's, replays the trace's good
// lines and the result's name says how many were skipped and why the first
// was; without it the first bad line stops the run with its
// *trace.ParseError. Before, kvbench had no way past one bad line (a
// truncated last line of a download, say), where the demo had.
func TestSkipBadLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.jsonl")
	body := `{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [0, 1]}` + "\n" +
		`{"timestamp": 3, "input_length": 600, "output_length": 1, "hash_ids": [0, 1]}` + "\n" +
		`{"timestamp": 5, "input_length": 600, "output_length": 1, "hash_ids": [0, 1, 2]}` + "\n" +
		`{"timestamp": 7, "input_length": 600, "outp`
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags([]string{"-suite", "trace", "-trace", path}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	_, err = runSuites(o, metricsSink{})
	var pe *trace.ParseError
	if !errors.As(err, &pe) || pe.Line != 3 {
		t.Fatalf("without -skip-bad-lines: %v, want line 3's *trace.ParseError", err)
	}
	o, err = parseFlags([]string{"-suite", "trace", "-trace", path, "-skip-bad-lines", "-capacity", "4"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := runSuites(o, metricsSink{})
	if err != nil {
		t.Fatal(err)
	}
	tr := rep.Trace
	if tr.Requests != 2 || tr.Capacities[0].HitRatio["lru"] != 0.5 {
		t.Errorf("%d requests, lru hit ratio %v: want the 2 good ones, 2 hits of 4 refs", tr.Requests, tr.Capacities[0].HitRatio["lru"])
	}
	for _, want := range []string{"2 of 4 lines", "trace line 3: field hash_ids"} {
		if !strings.Contains(tr.Trace, want) {
			t.Errorf("trace name %q does not say %q", tr.Trace, want)
		}
	}
	if _, err := parseFlags([]string{"-suite", "trace", "-skip-bad-lines"}, io.Discard); err == nil {
		t.Error("-skip-bad-lines without -trace accepted")
	}
}
