package events

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestClientsRefuseBadPort: the package doc says an endpoint with a bad
// port is refused with ErrBadEndpoint by the clients as by Listen. A port
// out of range can never be dialed: Subscribe and Replay must say so at
// once, not retry until ctx ends with an error that is not ErrBadEndpoint.
func TestClientsRefuseBadPort(t *testing.T) {
	const ep = "tcp://127.0.0.1:99999"
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if s, err := Subscribe(ctx, ep, ""); !errors.Is(err, ErrBadEndpoint) {
		if s != nil {
			s.Close()
		}
		t.Errorf("Subscribe(%q): %v, want ErrBadEndpoint", ep, err)
	}
	if _, err := Replay(ctx, ep, 0); !errors.Is(err, ErrBadEndpoint) {
		t.Errorf("Replay(%q): %v, want ErrBadEndpoint", ep, err)
	}
	if ctx.Err() != nil {
		t.Errorf("the clients retried a port that can never be dialed until the deadline")
	}
}
