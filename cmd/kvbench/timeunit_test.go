package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestTimeUnitReachesTrace: -time-unit reaches the trace reader. A
// nanosecond trace three hours long overflows a Duration read as
// milliseconds, the default, and reads with -time-unit 1ns.
func TestTimeUnitReachesTrace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ns.jsonl")
	in := `{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}
{"timestamp": 10800000000000, "input_length": 10, "output_length": 1, "hash_ids": [1]}
`
	if err := os.WriteFile(path, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	o, err := parseFlags([]string{"-suite", "trace", "-trace", path}, io.Discard)
	if err != nil || o.timeUnit != time.Millisecond {
		t.Fatalf("default -time-unit: %v %v, want 1ms", o.timeUnit, err)
	}
	if _, _, _, err := loadTrace(o.traceFile()); err == nil {
		t.Fatal("a 3-hour ns trace read as ms: no error")
	}
	o, err = parseFlags([]string{"-suite", "trace", "-trace", path, "-time-unit", "1ns"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	reqs, _, _, err := loadTrace(o.traceFile())
	if err != nil || len(reqs) != 2 || reqs[1].Timestamp != (3*time.Hour).Milliseconds() {
		t.Fatalf("-time-unit 1ns: %+v %v, want the second request at 3h", reqs, err)
	}
}
