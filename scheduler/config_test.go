package scheduler

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/kvtier/kvtier/trace"
)

// TestArrivalOverflow: a timestamp whose scaled offset does not fit a
// time.Duration (an hour of trace stamped in nanoseconds is 3.6e12 "ms",
// 3.6e18 ns: it fits at scale 1 and not at 3) is a config error that says
// so, where the plain conversion made it arrive at a negative time and New
// complained that the trace was not sorted.
func TestArrivalOverflow(t *testing.T) {
	hourNS := int64(time.Hour)
	cache := newFakeCache(fakeConfig{gpuBlocks: 64, blockSize: trace.BlockTokens})
	reqs := []trace.Request{req(0, 100, 1, 0), req(hourNS, 100, 1, 10)}
	if _, err := New(cache, reqs, Config{TimeScale: 1}); err != nil {
		t.Fatalf("scale 1: %v", err)
	}
	for _, scale := range []float64{3, 1e9} {
		s, err := New(cache, reqs, Config{TimeScale: scale})
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), "request 1: ") || !strings.Contains(err.Error(), "timestamp 3600000000000 ms at time scale") {
			t.Fatalf("scale %g: %v, want ErrBadConfig naming request 1's timestamp (%v)", scale, err, s)
		}
	}
	for _, c := range []struct {
		ts    int64
		scale float64
		want  time.Duration
		ok    bool
	}{
		{0, 0, 0, true}, {1500, 0, 1500 * time.Millisecond, true}, {1500, 2, 3 * time.Second, true},
		{hourNS, 1, time.Duration(hourNS) * time.Millisecond, true},
		{-1, 1, 0, false}, {hourNS, 3, 0, false}, {math.MaxInt64, 1, 0, false}, {1, math.Inf(1), 0, false},
	} {
		got, err := ArrivalTime(c.ts, c.scale)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("ArrivalTime(%d, %g) = %v, %v; want %v (ok %v)", c.ts, c.scale, got, err, c.want, c.ok)
		}
	}
}

// TestHugeInputLength: a request whose input length is near math.MaxInt
// needs more hash ids than any trace holds, and New says so. The count of
// ids needed was computed as (InputLength + TraceBlockTokens - 1) /
// TraceBlockTokens, which wraps negative there: New accepted the request
// and the first Step panicked making its prompt (makeslice: cap out of
// range).
func TestHugeInputLength(t *testing.T) {
	cache := newFakeCache(fakeConfig{gpuBlocks: 64, blockSize: trace.BlockTokens})
	for _, in := range []int{math.MaxInt, math.MaxInt - trace.BlockTokens + 2} {
		r := trace.Request{InputLength: in, OutputLength: 1, HashIDs: []int64{1}}
		if _, err := New(cache, []trace.Request{r}, Config{}); !errors.Is(err, ErrBadConfig) {
			t.Errorf("input length %d with one hash id: %v, want ErrBadConfig", in, err)
		}
	}
}
