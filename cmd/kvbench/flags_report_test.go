package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestFlagsReportUnusedRejected checks that a flag nothing in the run would
// read is refused, by name, when the flags are parsed: before any suite runs.
func TestFlagsReportUnusedRejected(t *testing.T) {
	for _, tc := range []struct {
		args []string
		flag string // the flag the error must name
	}{
		{[]string{"-suite", "alloc", "-redis-cluster"}, "-redis-cluster"},
		{[]string{"-redis-cluster"}, "-redis-cluster"},
		{[]string{"-suite", "trace", "-trace-block-tokens", "16"}, "-trace-block-tokens"},
		{[]string{"-suite", "trace", "-block-tokens", "16"}, "-block-tokens"},
		{[]string{"-suite", "trace", "-time-unit", "1s"}, "-time-unit"},
		{[]string{"-suite", "trace", "-trace", "x.jsonl", "-time-unit", "0s"}, "-time-unit"},
		{[]string{"-suite", "trace", "-trace", "x.jsonl", "-time-unit", "seconds"}, "-time-unit"},
		{[]string{"-suite", "alloc", "-trace", "x.jsonl"}, "-trace"},
		{[]string{"-suite", "copy,alloc", "-trace", "x.jsonl"}, "-trace"},
		{[]string{"-suite", "alloc", "-capacity", "64"}, "-capacity"},
		{[]string{"-suite", "replay", "-capacity", "64"}, "-capacity"},
		{[]string{"-suite", "trace", "-dir", "/tmp"}, "-dir"},
		{[]string{"-suite", "alloc", "-redis", "127.0.0.1:6379"}, "-redis"},
	} {
		if _, err := parseFlags(tc.args, io.Discard); err == nil || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("parseFlags(%q) = %v, want an error naming %s", tc.args, err, tc.flag)
		}
	}
	var out bytes.Buffer
	args := []string{"-quick", "-suite", "alloc", "-capacity", "64"}
	if err := run(context.Background(), args, &out, io.Discard); err == nil || out.Len() > 0 {
		t.Errorf("run(%q) = %v and printed %d bytes, want an error and no report", args, err, out.Len())
	}
}

// TestFlagsReportUsedAccepted checks that the same flags pass where a suite
// of the run reads them.
func TestFlagsReportUsedAccepted(t *testing.T) {
	for _, args := range [][]string{
		{"-suite", "remote", "-redis", "127.0.0.1:6379", "-redis-cluster"},
		{"-redis", "127.0.0.1:6379", "-redis-cluster"}, // all: remote included
		{"-suite", "trace", "-trace", "x.jsonl", "-trace-block-tokens", "16"},
		{"-suite", "replay", "-trace", "x.jsonl", "-trace-block-tokens", "16"},
		{"-suite", "replay", "-trace", "x.jsonl", "-time-unit", "1ns"},
		{"-trace", "x.jsonl"},
		{"-suite", "trace", "-capacity", "64"},
		{"-capacity", "64"},
		{"-suite", "copy", "-dir", "/tmp"},
		{"-dir", "/tmp"},
		{"-suite", "alloc,remote", "-redis", "127.0.0.1:6379"},
		{"-suite", "alloc"}, // defaults are never refused
	} {
		if _, err := parseFlags(args, io.Discard); err != nil {
			t.Errorf("parseFlags(%q): %v", args, err)
		}
	}
}

// TestTraceBlockTokensAlias: the trace's tokens per hash id is
// -trace-block-tokens, as in the demo, whose -block-tokens is the cache's
// block size. The old -block-tokens still sets it, says it is deprecated
// (in -h and when used), and may not contradict the new name.
func TestTraceBlockTokensAlias(t *testing.T) {
	for _, args := range [][]string{
		{"-suite", "trace", "-trace", "x.jsonl", "-trace-block-tokens", "16"},
		{"-suite", "trace", "-trace", "x.jsonl", "-block-tokens", "16"},
		{"-suite", "trace", "-trace", "x.jsonl", "-block-tokens", "16", "-trace-block-tokens", "16"},
	} {
		var stderr bytes.Buffer
		o, err := parseFlags(args, &stderr)
		if err != nil || o.traceBlockTokens != 16 {
			t.Errorf("parseFlags(%q) = %d tokens a hash id, %v; want 16", args, o.traceBlockTokens, err)
		}
		if old := slices.Contains(args, "-block-tokens"); old != strings.Contains(stderr.String(), "-block-tokens is deprecated") {
			t.Errorf("parseFlags(%q): stderr %q", args, stderr.String())
		}
	}
	args := []string{"-suite", "trace", "-trace", "x.jsonl", "-block-tokens", "16", "-trace-block-tokens", "32"}
	if _, err := parseFlags(args, io.Discard); err == nil {
		t.Errorf("parseFlags(%q) accepted two block sizes", args)
	}
	var help bytes.Buffer
	if _, err := parseFlags([]string{"-h"}, &help); !errors.Is(err, flag.ErrHelp) {
		t.Fatal(err)
	}
	h := help.String()
	if !strings.Contains(h, "-trace-block-tokens") || !regexp.MustCompile(`-block-tokens int\s+deprecated: the old name of -trace-block-tokens`).MatchString(h) {
		t.Errorf("-h does not name -trace-block-tokens and mark -block-tokens deprecated:\n%s", h)
	}
}
