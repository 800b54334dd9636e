package events

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestPortZeroSpelledWithZeros: port 0 written "00", "000" or "+0" is port 0
// to Go's dialer, and no one listens there: Subscribe and Replay refuse it at
// once with ErrBadEndpoint, as they refuse "0" and as Listen refuses a
// connecting PUB endpoint on it (strconv reads "00" as 0, and "+0" is no number to it), rather than
// dialing it until ctx ends.
func TestPortZeroSpelledWithZeros(t *testing.T) {
	for _, ep := range []string{"tcp://127.0.0.1:00", "tcp://localhost:000", "tcp://[::1]:00", "tcp://127.0.0.1:+0"} {
		if ep != "tcp://[::1]:00" { // "::" binds (vLLM's rule), so only the others connect
			if s, err := Listen(ServerConfig{Endpoint: ep}, nil); !errors.Is(err, ErrBadEndpoint) {
				if s != nil {
					s.Close()
				}
				t.Errorf("Listen(%q) = %v, want ErrBadEndpoint", ep, err)
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if s, err := Subscribe(ctx, ep, ""); !errors.Is(err, ErrBadEndpoint) || ctx.Err() != nil {
			if s != nil {
				s.Close()
			}
			t.Errorf("Subscribe(%q) = %v (ctx: %v), want ErrBadEndpoint at once", ep, err, ctx.Err())
		}
		cancel()
		ctx, cancel = context.WithTimeout(context.Background(), 2*time.Second)
		if _, err := Replay(ctx, ep, 0); !errors.Is(err, ErrBadEndpoint) || ctx.Err() != nil {
			t.Errorf("Replay(%q) = %v (ctx: %v), want ErrBadEndpoint at once", ep, err, ctx.Err())
		}
		cancel()
	}
}
