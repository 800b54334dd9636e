package scheduler

import (
	"context"
	"fmt"
	"reflect"
	"time"
)

// ClockMode picks the run's notion of time.
type ClockMode int

const (
	// Logical time starts at 0 and moves only when the scheduler says so: a step
	// advances it by the cost model's step time, and an idle scheduler jumps it
	// to the next event (an arrival, a modelled transfer's end, a timeout). A
	// one-hour trace replays in seconds and equal inputs give equal results.
	Logical ClockMode = iota + 1
	// Wall time is real time since the run started: arrivals are released when
	// it reaches their timestamp, each step lasts at least the cost model's step
	// time (the scheduler waits out the rest, emulating the GPU), and loads take
	// as long as the cache really takes.
	Wall
)

func (m ClockMode) String() string {
	switch m {
	case Logical:
		return "logical"
	case Wall:
		return "wall"
	}
	return fmt.Sprintf("ClockMode(%d)", int(m))
}

// clock is the scheduler's time source. Times are offsets from the run's start.
type clock interface {
	now() time.Duration
	// stepDone ends a step that began at start and costs d, and returns its end.
	stepDone(ctx context.Context, start, d time.Duration) (time.Duration, error)
	// idle waits for the next event: until `until` (when hasUntil) or until one of
	// chans is closed, whichever comes first.
	idle(ctx context.Context, until time.Duration, hasUntil bool, chans []<-chan struct{}) error
}

func newClock(m ClockMode) clock {
	if m == Wall {
		return &wallClock{start: time.Now()}
	}
	return &logicalClock{}
}

type logicalClock struct{ t time.Duration }

func (c *logicalClock) now() time.Duration { return c.t }

func (c *logicalClock) stepDone(_ context.Context, start, d time.Duration) (time.Duration, error) {
	c.t = max(c.t, start+d)
	return c.t, nil
}

// idle on the logical clock blocks on chans if there are any (the cache's real
// completion is owed now); otherwise it jumps to until.
func (c *logicalClock) idle(ctx context.Context, until time.Duration, hasUntil bool, chans []<-chan struct{}) error {
	if len(chans) > 0 {
		return waitAny(ctx, nil, chans)
	}
	if hasUntil {
		c.t = max(c.t, until)
	}
	return nil
}

type wallClock struct{ start time.Time }

func (c *wallClock) now() time.Duration { return time.Since(c.start) }

func (c *wallClock) stepDone(ctx context.Context, start, d time.Duration) (time.Duration, error) {
	if wait := start + d - c.now(); wait > 0 {
		if err := waitAny(ctx, time.After(wait), nil); err != nil {
			return c.now(), err
		}
	}
	return c.now(), nil
}

func (c *wallClock) idle(ctx context.Context, until time.Duration, hasUntil bool, chans []<-chan struct{}) error {
	var timer <-chan time.Time
	if hasUntil {
		wait := until - c.now()
		if wait <= 0 {
			return nil
		}
		t := time.NewTimer(wait)
		defer t.Stop()
		timer = t.C
	}
	if timer == nil && len(chans) == 0 {
		return fmt.Errorf("%w: nothing to wait for", ErrStalled)
	}
	return waitAny(ctx, timer, chans)
}

// waitAny blocks until ctx is done, timer fires or one of chans is closed.
func waitAny(ctx context.Context, timer <-chan time.Time, chans []<-chan struct{}) error {
	if timer == nil && len(chans) == 1 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-chans[0]:
			return nil
		}
	}
	cases := make([]reflect.SelectCase, 0, len(chans)+2)
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())})
	if timer != nil {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timer)})
	}
	for _, ch := range chans {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)})
	}
	if i, _, _ := reflect.Select(cases); i == 0 {
		return ctx.Err()
	}
	return nil
}

// isClosed reports whether ch is closed (nil counts as closed: nothing loads).
func isClosed(ch <-chan struct{}) bool {
	if ch == nil {
		return true
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
