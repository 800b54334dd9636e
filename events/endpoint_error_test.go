package events

import (
	"errors"
	"testing"
)

// TestListenEndpointError: Listen says which socket's endpoint it could not
// use (*EndpointError), so a caller can name the setting to fix; the cause
// still matches ErrBadEndpoint.
func TestListenEndpointError(t *testing.T) {
	for _, c := range []struct {
		cfg    ServerConfig
		socket string
	}{
		{ServerConfig{Endpoint: "inproc://kv"}, "PUB"},
		{ServerConfig{Endpoint: "tcp://127.0.0.1:0"}, "PUB"}, // connects, to port 0
		{ServerConfig{Endpoint: "tcp://*:0", ReplayEndpoint: "udp://*:0"}, "ROUTER"},
	} {
		s, err := Listen(c.cfg, failingSource{})
		if s != nil {
			_ = s.Close()
		}
		ee, ok := errors.AsType[*EndpointError](err)
		if !ok || ee.Socket != c.socket || !errors.Is(err, ErrBadEndpoint) {
			t.Errorf("%+v: %v, want an *EndpointError for %s wrapping ErrBadEndpoint", c.cfg, err, c.socket)
		}
	}
}
