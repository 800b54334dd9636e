package kvtier

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestEventsLinger: EventsConfig.Linger reaches the events server
// (events.ServerConfig.Linger): Close waits that long for a subscriber
// whose writer is stuck on a full connection, then gives up on it. The
// check is a lower bound, which no load can break: under the default of
// one second Close returns well before the two seconds asked (it did, with
// the field present but not passed). The upper bound is only a hang check.
func TestEventsLinger(t *testing.T) {
	_, err := New(Config{GPUBlocks: 8, Events: &EventsConfig{Endpoint: "tcp://*:0", Linger: -time.Nanosecond}})
	var ce *ConfigError
	if !errors.Is(err, ErrBadConfig) || !errors.As(err, &ce) || ce.Field != "Events.Linger" {
		t.Errorf("Linger -1ns: %v, want a *ConfigError for Events.Linger", err)
	}

	const linger = 2 * time.Second
	m, ctx := withStuckSubscriber(t, linger)
	start := time.Now()
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < linger || took > linger+time.Minute {
		t.Fatalf("Close with a stuck subscriber took %v, want at least the Linger of %v (and no hang)", took, linger)
	}
}

// withStuckSubscriber returns a Manager publishing KV events with the given
// Linger and one subscriber whose writer is stuck on a full connection,
// and a context of two minutes for the test; both end with the test.
func withStuckSubscriber(t *testing.T, linger time.Duration) (*Manager, context.Context) {
	t.Helper()
	m, err := New(Config{GPUBlocks: 2 * subqBlocks, BlockTokens: subqBlockTokens, ReadDeadlineBase: time.Minute,
		Events: &EventsConfig{Endpoint: "tcp://*:0", Topic: "kv", SubscriberQueue: 1, Linger: linger}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	stuck := stuckSubscriber(t, ctx, m)
	t.Cleanup(func() { stuck.Close() })
	return m, ctx
}
