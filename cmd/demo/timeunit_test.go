package main

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// TestTimeUnitFlag: -time-unit 1s reads a trace stamped in float seconds
// (guidellm's) as milliseconds; the default, 1ms, reads it a thousand times
// faster. -time-unit needs -trace, and must be positive.
func TestTimeUnitFlag(t *testing.T) {
	path := filepath.Join(t.TempDir(), "seconds.jsonl")
	const in = `{"timestamp": 10.5, "input_length": 10, "output_length": 1, "hash_ids": [0]}
{"timestamp": 12.25, "input_length": 10, "output_length": 1, "hash_ids": [1]}
`
	if err := os.WriteFile(path, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want []int64
	}{
		{[]string{"-trace", path, "-time-unit", "1s"}, []int64{0, 1750}},
		{[]string{"-trace", path}, []int64{0, 2}},
	} {
		o, err := parseFlags(c.args, io.Discard)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		reqs, _, err := loadTrace(o)
		if err != nil {
			t.Fatalf("%q: %v", c.args, err)
		}
		got := []int64{reqs[0].Timestamp, reqs[1].Timestamp}
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: timestamps %v ms, want %v", c.args, got, c.want)
		}
	}
	if o, err := parseFlags(nil, io.Discard); err != nil || o.traceTimeUnit != time.Millisecond {
		t.Errorf("default: %v %v, want 1ms", o.traceTimeUnit, err)
	}
	for _, args := range [][]string{
		{"-time-unit", "1s"},
		{"-trace", path, "-time-unit", "0s"},
		{"-trace", path, "-time-unit", "-1ms"},
		{"-trace", path, "-time-unit", "seconds"},
	} {
		if _, err := parseFlags(args, io.Discard); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}
