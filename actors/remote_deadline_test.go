package actors

import (
	"testing"
	"time"
)

// TestWallDeadline: a read's deadline set on a clock far from the wall
// clock (a simulator's) leaves the network call the same time in wall time:
// 50 ms on the clock is about 50 ms from now, not long past nor far ahead.
func TestWallDeadline(t *testing.T) {
	sim := time.Unix(1e9, 0) // 2001: every deadline on it is long past in wall time
	d := sim.Add(50 * time.Millisecond)
	before := time.Now()
	got := wallDeadline(d, func() time.Time { return sim })
	after := time.Now()
	if got.Before(before.Add(50*time.Millisecond)) || got.After(after.Add(50*time.Millisecond)) {
		t.Fatalf("wall deadline %v, want 50 ms after a moment in [%v, %v]", got, before, after)
	}
	if got := wallDeadline(d, nil); !got.Equal(d) {
		t.Fatalf("with no clock: %v, want the deadline itself %v", got, d)
	}
}
