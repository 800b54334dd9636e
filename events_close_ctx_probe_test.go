package kvtier

import (
	"context"
	"testing"
	"time"
)

// TestCloseContextBoundsLinger: Close's ctx bounds the whole Close, the
// wait for a stuck subscriber (EventsConfig.Linger) included: a Close
// whose ctx ends after a second must not wait out a Linger of half a
// minute (a shutdown under a grace period would be killed first).
func TestCloseContextBoundsLinger(t *testing.T) {
	const linger = 30 * time.Second
	m, _ := withStuckSubscriber(t, linger)
	closeCtx, cancelClose := context.WithTimeout(context.Background(), time.Second)
	defer cancelClose()
	start := time.Now()
	_ = m.Close(closeCtx)
	if took := time.Since(start); took > linger/2 {
		t.Fatalf("Close with a ctx of 1s took %v: it waited out the Linger of %v", took, linger)
	}
}
