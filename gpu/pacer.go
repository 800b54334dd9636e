package gpu

import (
	"math/bits"
	"sync"
	"time"
)

// Clock is the time source of the host backend's bandwidth model. Tests
// inject a fake one so pacing is deterministic.
type Clock interface {
	Now() time.Time
	// After returns a channel that receives once d has elapsed.
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// pacer models a full-duplex link (PCIe) of a fixed bandwidth per
// direction shared by all of a device's streams: a batch of n bytes holds
// its direction's link for n/bw, starting when the link is free.
type pacer struct {
	clock Clock
	bw    uint64 // bytes per second, > 0

	mu   sync.Mutex
	free [H2D + 1]time.Time // when each direction's link is next idle
}

// reserve books n bytes on dir's link and returns when they are through.
func (p *pacer) reserve(dir Direction, n int) time.Time {
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	start := p.free[dir]
	if start.Before(now) {
		start = now
	}
	due := start.Add(transferTime(uint64(n), p.bw))
	p.free[dir] = due
	return due
}

// wait blocks until the clock reaches due.
func (p *pacer) wait(due time.Time) {
	if d := due.Sub(p.clock.Now()); d > 0 {
		<-p.clock.After(d)
	}
}

// transferTime is n/bw seconds, rounded up to the nanosecond, without
// overflow; absurdly long transfers saturate.
func transferTime(n, bw uint64) time.Duration {
	hi, lo := bits.Mul64(n, uint64(time.Second))
	if hi >= bw {
		return time.Duration(1<<63 - 1)
	}
	q, r := bits.Div64(hi, lo, bw)
	if r != 0 {
		q++
	}
	if q > 1<<63-1 {
		return time.Duration(1<<63 - 1)
	}
	return time.Duration(q)
}
