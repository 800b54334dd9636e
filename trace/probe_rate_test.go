package trace

import (
	"errors"
	"math"
	"testing"
	"time"
)

// TestProbeSyntheticTinyRate: a RatePerSecond so low that arrivals pass
// what an int64 of milliseconds (or a time.Duration, the bound Read holds
// timestamps to) can hold is refused with ErrSyntheticConfig; it used to
// convert the overflowing float clock to int64, giving negative,
// unsorted timestamps.
func TestProbeSyntheticTinyRate(t *testing.T) {
	for _, rate := range []float64{1e-300, 1e-16, 1e-10} {
		cfg := DefaultSyntheticConfig()
		cfg.Sessions = 64
		cfg.Turns = IntRange{1, 2}
		cfg.RatePerSecond = rate
		reqs, err := Synthetic(cfg)
		if err != nil {
			if !errors.Is(err, ErrSyntheticConfig) {
				t.Errorf("rate %g: %v does not wrap ErrSyntheticConfig", rate, err)
			}
			continue
		}
		for i, r := range reqs {
			if r.Timestamp < 0 || (i > 0 && r.Timestamp < reqs[i-1].Timestamp) ||
				float64(r.Timestamp)*float64(time.Millisecond) >= math.MaxInt64 {
				t.Errorf("rate %g: request %d at %d ms (previous %d): not a sorted, non-negative Duration in ms",
					rate, i, r.Timestamp, reqs[max(i-1, 0)].Timestamp)
				break
			}
		}
	}
}
