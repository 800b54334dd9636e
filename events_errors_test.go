package kvtier

import (
	"context"
	"errors"
	"testing"

	"github.com/kvtier/kvtier/events"
)

// TestEventsErrorsTyped: New's errors for the events config wrap both
// ErrBadConfig and the events package's sentinel, so a caller can branch on
// either: an endpoint events cannot use (events.ErrBadEndpoint) and an
// unknown format (events.ErrBadConfig, and a *ConfigError naming the field).
func TestEventsErrorsTyped(t *testing.T) {
	for _, c := range []struct {
		ev   EventsConfig
		want error
	}{
		{EventsConfig{Endpoint: "inproc://kv"}, events.ErrBadEndpoint},
		{EventsConfig{Endpoint: "tcp://*:notaport"}, events.ErrBadEndpoint},
		{EventsConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "udp://*:0"}, events.ErrBadEndpoint},
		{EventsConfig{Endpoint: "tcp://router"}, events.ErrBadEndpoint},
		{EventsConfig{Endpoint: "tcp://127.0.0.1:0"}, events.ErrBadEndpoint}, // connects, to port 0
		{EventsConfig{Endpoint: "tcp://*:0", Format: "xml"}, events.ErrBadConfig},
	} {
		m, err := New(Config{GPUBlocks: 8, Events: &c.ev})
		if m != nil {
			_ = m.Close(context.Background())
		}
		if !errors.Is(err, ErrBadConfig) || !errors.Is(err, c.want) {
			t.Errorf("%+v: %v, want ErrBadConfig and %v", c.ev, err, c.want)
		}
	}
	_, err := New(Config{GPUBlocks: 8, Events: &EventsConfig{Endpoint: "tcp://*:0", Format: "xml"}})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "Events.Format" {
		t.Errorf("an unknown format: %v, want a *ConfigError for Events.Format", err)
	}
}
