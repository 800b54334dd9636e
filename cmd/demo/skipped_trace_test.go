package main

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvtier/kvtier/trace"
)

// TestEveryLineSkipped: with -skip-bad-lines, a trace whose every line is
// malformed is refused with the count and the first line's *trace.ParseError,
// not as "the trace has no requests", which read as an empty file and
// named no line (a trace of 16-token ids read at 512 tokens an id is one).
func TestEveryLineSkipped(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.jsonl")
	body := `{"timestamp": 0, "input_length": 40, "output_length": 1, "hash_ids": [0, 1, 2]}` + "\n" +
		`{"timestamp": 5, "input_length": 40, "output_length": 1, "hash_ids": [0, 1, 3]}` + "\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	err := run(context.Background(), []string{"-trace", path, "-skip-bad-lines", "-plot", ""}, io.Discard, io.Discard, false)
	var pe *trace.ParseError
	if !errors.As(err, &pe) || pe.Line != 1 || !errors.Is(err, trace.ErrMalformed) || !strings.Contains(err.Error(), "2 lines") {
		t.Fatalf("err %v, want one naming the 2 skipped lines and wrapping line 1's *trace.ParseError", err)
	}
	if err := os.WriteFile(path, []byte("\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	err = run(context.Background(), []string{"-trace", path, "-skip-bad-lines", "-plot", ""}, io.Discard, io.Discard, false)
	if err == nil || errors.As(err, &pe) || !strings.Contains(err.Error(), "no requests") {
		t.Fatalf("blank trace: err %v, want 'no requests'", err)
	}
}

// TestSkippedLinesNamed: the name the header and the JSON carry says how
// many of the trace's lines -skip-bad-lines skipped, and why the first was
// malformed: a 16-token-id trace read at 512 tokens an id kept 4 of 300
// requests, and the header said only "296 malformed lines skipped", hiding
// the hint that -trace-block-tokens 16 would read them all.
func TestSkippedLinesNamed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mixed.jsonl")
	body := `{"timestamp": 0, "input_length": 40, "output_length": 1, "hash_ids": [0]}` + "\n" +
		`{"timestamp": 5, "input_length": 40, "output_length": 1, "hash_ids": [0, 1, 3]}` + "\n\n" +
		`{"timestamp": 9, "input_length": 40, "output_length": 1}` + "\n"
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags([]string{"-trace", path, "-skip-bad-lines"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	reqs, name, err := loadTrace(o)
	if err != nil || len(reqs) != 1 {
		t.Fatalf("%d requests, %v; want 1", len(reqs), err)
	}
	for _, want := range []string{"2 of 3 lines", "trace line 2: field hash_ids", "16-token ids would match"} {
		if !strings.Contains(name, want) {
			t.Errorf("name %q does not say %q", name, want)
		}
	}
}
