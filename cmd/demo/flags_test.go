package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kvtier/kvtier"
	"github.com/kvtier/kvtier/trace"
)

// TestFlagsRejectedAtParse: flags that would be silently ignored, fail only
// after every replay, or make the figures meaningless are parse errors, each
// naming its flag.
func TestFlagsRejectedAtParse(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		// -nodes runs runFleet, which reads none of these.
		{[]string{"-nodes", "2", "-json", "x.json"}, "-json: not used in the multi-node mode"},
		{[]string{"-nodes", "2", "-json", "-"}, "-json: not used in the multi-node mode"},
		{[]string{"-nodes", "2", "-plot", "p.png"}, "-plot: not used in the multi-node mode"},
		{[]string{"-nodes", "2", "-plot", "kvtier-demo.png"}, "-plot: not used in the multi-node mode"}, // the default, given
		{[]string{"-nodes", "2", "-configs", "disk"}, "-configs: not used in the multi-node mode"},
		{[]string{"-nodes", "2", "-disk-dir", dir}, "-disk-dir: not used in the multi-node mode"},
		{[]string{"-nodes", "2", "-disk-blocks", "10"}, "-disk-blocks: not used in the multi-node mode"},
		{[]string{"-nodes", "2", "-disk-policy", "lru"}, "-disk-policy: not used in the multi-node mode"},
		{[]string{"-nodes", "2", "-disk-ingestion", "all"}, "-disk-ingestion: not used in the multi-node mode"},
		{[]string{"-nodes", "2", "-disk-write-quota", "5"}, "-disk-write-quota: not used in the multi-node mode"},
		{[]string{"-nodes", "2", "-progress"}, "-progress: not used in the multi-node mode"},
		{[]string{"-nodes", "2", "-series-interval", "1s"}, "-series-interval: not used in the multi-node mode"},
		{[]string{"-route", "rr"}, "-route: routing is for the multi-node mode"},
		// -plot's extension, checked before any replay rather than after all.
		{[]string{"-plot", "out.txt"}, "-plot: out.txt: the name must end in .png or .svg"},
		{[]string{"-plot", "out"}, "-plot: out: the name must end in .png or .svg"},
		// An output file's directory, checked before any replay: the
		// files are written after every configuration has run.
		{[]string{"-plot", filepath.Join(dir, "none", "p.png")}, "-plot: " + filepath.Join(dir, "none", "p.png") + ": the directory must exist"},
		{[]string{"-plot", filepath.Join(file, "p.svg")}, "-plot: " + filepath.Join(file, "p.svg") + ": " + file + " is not a directory"},
		{[]string{"-json", filepath.Join(dir, "none", "x.json")}, "-json: " + filepath.Join(dir, "none", "x.json") + ": the directory must exist"},
		// -disk-dir is not created (nor its parents, left behind).
		{[]string{"-disk-dir", filepath.Join(dir, "a", "b")}, "-disk-dir: must be an existing directory"},
		{[]string{"-disk-dir", file}, "-disk-dir: " + file + " is not a directory"},
		{[]string{"-events-replay", "tcp://127.0.0.1:5558"}, "-events-replay: answers replays of the -events publisher: add -events"},
		{[]string{"-vocab", "1"}, "-vocab: 1 must be >= 2"},
		{[]string{"-vocab", "0"}, "-vocab: 0 must be >= 2"},
		// Each flag named alone, with its value: "-limit/-max-output: must
		// be >= 0" did not say which was wrong.
		{[]string{"-limit", "-1"}, "-limit: -1 must be >= 0"},
		{[]string{"-max-output", "-2"}, "-max-output: -2 must be >= 0"},
		{[]string{"-read-deadline", "-1s"}, "-read-deadline: -1s must be >= 0"},
		{[]string{"-onboard-timeout", "-1ms"}, "-onboard-timeout: -1ms must be >= 0"},
		{[]string{"-onboard-timeout-per-1k", "-1ms"}, "-onboard-timeout-per-1k: -1ms must be >= 0"},
	} {
		_, err := parseFlags(c.args, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("parseFlags(%q): %v, want an error with %q", c.args, err, c.want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); err == nil {
		t.Errorf("parsing -disk-dir %s created %s", filepath.Join(dir, "a", "b"), filepath.Join(dir, "a"))
	}
	for _, args := range [][]string{
		// What the multi-node mode reads, and empty values that ask for nothing.
		{"-nodes", "2", "-plot", "", "-json", "", "-progress=false", "-route", "rr", "-pinned-policy", "arc", "-ingestion", "hot",
			"-metrics-addr", "127.0.0.1:0", "-events", "tcp://127.0.0.1:5557", "-events-replay", "tcp://127.0.0.1:5558", "-vocab", "2"},
		{"-plot", "x.SVG"}, {"-plot", filepath.Join(dir, "p.png")}, {"-plot", ""},
		{"-disk-dir", dir, "-configs", "disk"},
	} {
		if _, err := parseFlags(args, &bytes.Buffer{}); err != nil {
			t.Errorf("parseFlags(%q): %v", args, err)
		}
	}
}

// TestBadFlagsStopBeforeWork: run returns the error before it replays
// anything: no table, no plot, no directory created.
func TestBadFlagsStopBeforeWork(t *testing.T) {
	path, _ := smallTrace(t)
	dir := t.TempDir()
	for _, extra := range [][]string{
		{"-plot", filepath.Join(dir, "out.txt")},
		{"-disk-dir", filepath.Join(dir, "a", "b"), "-plot", filepath.Join(dir, "p.png")},
		{"-nodes", "2", "-json", filepath.Join(dir, "out.json")},
		{"-nodes", "2", "-plot", filepath.Join(dir, "p.png")},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append(smallArgs(path), extra...), &stdout, &stderr, false)
		if err == nil || stdout.Len() > 0 {
			t.Errorf("%q: error %v after writing %d bytes of table, want an error before any replay", extra, err, stdout.Len())
		}
	}
	if entries, err := os.ReadDir(dir); err != nil || len(entries) != 0 {
		t.Errorf("the rejected runs left %v in %s (%v)", entries, dir, err)
	}
}

// TestLimitedSampleName: with -limit the embedded sample is named by the
// requests replayed, in the table's header as in the JSON.
func TestLimitedSampleName(t *testing.T) {
	total := len(trace.Sample())
	for _, c := range []struct {
		limit int
		n     int
		name  string
	}{
		{0, total, trace.SampleName},
		{total + 1, total, trace.SampleName},
		{total, total, trace.SampleName},
		{100, 100, "embedded: conversation_trace.jsonl, first 100 requests"},
	} {
		reqs, name, err := loadTrace(options{limit: c.limit})
		if err != nil || len(reqs) != c.n || name != c.name {
			t.Errorf("-limit %d: %d requests named %q (%v), want %d named %q", c.limit, len(reqs), name, err, c.n, c.name)
		}
	}
	var stdout bytes.Buffer
	if err := run(context.Background(), []string{"-limit", "10", "-configs", "gpu", "-plot", ""}, &stdout, &bytes.Buffer{}, false); err != nil {
		t.Fatal(err)
	}
	if head, _, _ := strings.Cut(stdout.String(), "\n"); !strings.Contains(head, "first 10 requests: 10 requests") {
		t.Errorf("-limit 10 on the sample: header %q", head)
	}
	// A file cut by -limit says so too.
	path, reqs := smallTrace(t)
	_, name, err := loadTrace(options{tracePath: path, limit: 5})
	if err != nil || name != path+", first 5 requests" {
		t.Errorf("-limit 5 on a file: %q (%v)", name, err)
	}
	if _, name, err := loadTrace(options{tracePath: path, limit: len(reqs) + 1}); err != nil || name != path {
		t.Errorf("-limit above a file's %d requests: %q (%v)", len(reqs), name, err)
	}
}

// TestDiskWriteQuotaHelpNamesManagerDefault: -h states the Manager's real
// default (it said 64, the disk actor's unused constant; New uses 256).
func TestDiskWriteQuotaHelpNamesManagerDefault(t *testing.T) {
	var stderr bytes.Buffer
	_, _ = parseFlags([]string{"-h"}, &stderr)
	help := stderr.String()
	i := strings.Index(help, "-disk-write-quota")
	if i < 0 {
		t.Fatalf("-h has no -disk-write-quota:\n%s", help)
	}
	line := help[i:]
	line = line[:strings.Index(line, "(default 4096)")]
	if want := fmt.Sprintf("is %d;", kvtier.DefaultDiskWriteQuota); !strings.Contains(line, want) || strings.Contains(line, "64") {
		t.Fatalf("-disk-write-quota help %q does not state the Manager's default %d", line, kvtier.DefaultDiskWriteQuota)
	}
}

// TestClassesFlag: the demo gives the tiers each finished request's class
// unless -classes=false.
func TestClassesFlag(t *testing.T) {
	for _, c := range []struct {
		args    []string
		noClass bool
	}{{nil, false}, {[]string{"-classes=false"}, true}, {[]string{"-classes"}, false}} {
		o, err := parseFlags(c.args, &bytes.Buffer{})
		if err != nil || o.noClass != c.noClass {
			t.Errorf("parseFlags(%q): noClass %v, %v; want %v", c.args, o.noClass, err, c.noClass)
		}
	}
}
