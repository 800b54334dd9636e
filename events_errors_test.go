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
// unknown format (events.ErrBadConfig), each a *ConfigError naming the
// field (the endpoints' errors named none).
func TestEventsErrorsTyped(t *testing.T) {
	for _, c := range []struct {
		ev    EventsConfig
		want  error
		field string
	}{
		{EventsConfig{Endpoint: "inproc://kv"}, events.ErrBadEndpoint, "Events.Endpoint"},
		{EventsConfig{Endpoint: "tcp://*:notaport"}, events.ErrBadEndpoint, "Events.Endpoint"},
		{EventsConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "udp://*:0"}, events.ErrBadEndpoint, "Events.ReplayEndpoint"},
		{EventsConfig{Endpoint: "tcp://router"}, events.ErrBadEndpoint, "Events.Endpoint"},
		{EventsConfig{Endpoint: "tcp://127.0.0.1:0"}, events.ErrBadEndpoint, "Events.Endpoint"}, // connects, to port 0
		{EventsConfig{Endpoint: "tcp://*:0", Format: "xml"}, events.ErrBadConfig, "Events.Format"},
	} {
		m, err := New(Config{GPUBlocks: 8, Events: &c.ev})
		if m != nil {
			_ = m.Close(context.Background())
		}
		if !errors.Is(err, ErrBadConfig) || !errors.Is(err, c.want) {
			t.Errorf("%+v: %v, want ErrBadConfig and %v", c.ev, err, c.want)
		}
		if ce, ok := errors.AsType[*ConfigError](err); !ok || ce.Field != c.field {
			t.Errorf("%+v: %v, want a *ConfigError for %s", c.ev, err, c.field)
		}
	}
	_, err := New(Config{GPUBlocks: 8, Events: &EventsConfig{Endpoint: "tcp://*:0", Format: "xml"}})
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != "Events.Format" {
		t.Errorf("an unknown format: %v, want a *ConfigError for Events.Format", err)
	}
}
