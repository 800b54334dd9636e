package trace

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

// tsLines is a trace of one-block requests with the given timestamps,
// written as they are (a fraction or an exponent kept).
func tsLines(stamps ...string) string {
	var b strings.Builder
	for i, ts := range stamps {
		fmt.Fprintf(&b, `{"timestamp": %s, "input_length": 10, "output_length": 1, "hash_ids": [%d]}`+"\n", ts, i)
	}
	return b.String()
}

func readStamps(t *testing.T, in string, opts Options) ([]int64, Report) {
	t.Helper()
	reqs, rep, err := Read(strings.NewReader(in), opts)
	if err != nil {
		t.Fatalf("%+v: %v", opts, err)
	}
	got := make([]int64, len(reqs))
	for i, r := range reqs {
		got[i] = r.Timestamp
	}
	return got, rep
}

// TestTimeUnitFloatSeconds: a trace stamped in float seconds (guidellm and
// others) reads with TimeUnit time.Second, to whole milliseconds rounded to
// the nearest; a fraction or an exponent is accepted for the timestamp.
func TestTimeUnitFloatSeconds(t *testing.T) {
	in := tsLines("1717000012.345", "1717000010", "1.7170000100006e9", "1717000010.0004")
	got, rep := readStamps(t, in, Options{TimeUnit: time.Second})
	if want := []int64{0, 0, 1, 2345}; !slices.Equal(got, want) || rep.Base != 1717000010 {
		t.Fatalf("float seconds: %v base %d, want %v base 1717000010", got, rep.Base, want)
	}
	// A scale multiplies the rounded milliseconds, and truncates.
	got, _ = readStamps(t, in, Options{TimeUnit: time.Second, TimeScale: 0.5})
	if want := []int64{0, 0, 0, 1172}; !slices.Equal(got, want) {
		t.Fatalf("float seconds at scale 0.5: %v, want %v", got, want)
	}
	// Fractional milliseconds (the default unit) round to the nearest.
	got, _ = readStamps(t, tsLines("0.5", "12.49", "2.5e1"), Options{})
	if want := []int64{0, 12, 25}; !slices.Equal(got, want) {
		t.Fatalf("fractional ms: %v, want %v", got, want)
	}
	// A fractional earliest timestamp: Report.Base is its integer part.
	got, rep = readStamps(t, tsLines("3", "2.75"), Options{TimeUnit: time.Second})
	if want := []int64{0, 250}; !slices.Equal(got, want) || rep.Base != 2 {
		t.Fatalf("fractional base: %v base %d, want %v base 2", got, rep.Base, want)
	}
}

// TestTimeUnitNanoseconds: a nanosecond trace an hour long read with
// TimeUnit time.Nanosecond is an hour of milliseconds (read as milliseconds
// it would be a million hours), exactly, even at the top of int64.
func TestTimeUnitNanoseconds(t *testing.T) {
	const epochNS = int64(1_717_000_000_000) * 1_000_000
	hour := int64(time.Hour)
	in := tsLines(fmt.Sprint(epochNS), fmt.Sprint(epochNS+1_499_999), fmt.Sprint(epochNS+1_500_000), fmt.Sprint(epochNS+hour))
	got, rep := readStamps(t, in, Options{TimeUnit: time.Nanosecond})
	if want := []int64{0, 1, 2, hour / int64(time.Millisecond)}; !slices.Equal(got, want) || rep.Base != epochNS {
		t.Fatalf("ns since the epoch: %v base %d, want %v base %d", got, rep.Base, want, epochNS)
	}
	// float64 holds no integer this large exactly: the offsets must still be.
	const top = math.MaxInt64
	in = tsLines(fmt.Sprint(top-2_500_000), fmt.Sprint(int64(top)), fmt.Sprint(top-1_000_001))
	got, _ = readStamps(t, in, Options{TimeUnit: time.Nanosecond})
	if want := []int64{0, 1, 3}; !slices.Equal(got, want) {
		t.Fatalf("ns near MaxInt64: %v, want %v", got, want)
	}
}

// TestTimeUnitOverflow: a coarse unit makes an offset past a Duration a
// line-numbered error, exactly at the limit, never a wrapped value.
func TestTimeUnitOverflow(t *testing.T) {
	maxS := int64(math.MaxInt64 / int64(time.Second)) // 9223372036 s
	got, _ := readStamps(t, tsLines("0", fmt.Sprint(maxS)), Options{TimeUnit: time.Second})
	if want := []int64{0, maxS * 1000}; !slices.Equal(got, want) {
		t.Fatalf("the longest offset: %v, want %v", got, want)
	}
	for _, c := range []struct {
		in   string
		unit time.Duration
	}{
		{tsLines("0", "1", fmt.Sprint(maxS+1)), time.Second},
		{tsLines("0", "1", fmt.Sprint(int64(math.MaxInt64))), time.Hour},
		{tsLines("0", "1", "1e300"), time.Hour},
		{tsLines("0.5", "1", fmt.Sprint(maxS+2)), time.Second},
	} {
		_, _, err := Read(strings.NewReader(c.in), Options{TimeUnit: c.unit})
		var pe *ParseError
		if !errors.As(err, &pe) || !errors.Is(err, ErrMalformed) || pe.Line != 3 || pe.Field != "timestamp" {
			t.Errorf("%q in %v: %v, want a timestamp error on line 3", c.in, c.unit, err)
		}
		reqs, rep, err := Read(strings.NewReader(c.in), Options{TimeUnit: c.unit, OnError: Skip})
		if err != nil || len(reqs) != 2 || rep.Skipped != 1 {
			t.Errorf("%q in %v, skip mode: %+v %+v %v", c.in, c.unit, reqs, rep, err)
		}
	}
}

// TestTimeUnitBadOptions: a negative TimeUnit is refused before any line.
func TestTimeUnitBadOptions(t *testing.T) {
	_, _, err := Read(strings.NewReader(goodLine), Options{TimeUnit: -time.Second})
	if !errors.Is(err, ErrBadOptions) || errors.Is(err, ErrMalformed) {
		t.Fatalf("TimeUnit -1s: %v, want ErrBadOptions", err)
	}
}
