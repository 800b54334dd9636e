package main

import "testing"

// TestReplicaEndpoints: each replica of the multi-node mode gets endpoints
// of its own: a tcp:// port offset by the replica's index (port 0 left to
// pick a free one), and an ipc:// path suffixed with _dp<index>, as vLLM
// suffixes the endpoints it cannot offset by data-parallel rank. An ipc://
// endpoint was left alone, so every replica bound the same path and the
// second one failed (address already in use).
func TestReplicaEndpoints(t *testing.T) {
	for _, c := range []struct {
		ep   string
		i    int
		want string
	}{
		{"tcp://*:5557", 0, "tcp://*:5557"},
		{"tcp://*:5557", 2, "tcp://*:5559"},
		{"tcp://*:0", 3, "tcp://*:0"},
		{"tcp://[::]:5557", 1, "tcp://[::]:5558"},
		{"ipc:///tmp/kv.sock", 0, "ipc:///tmp/kv.sock"},
		{"ipc:///tmp/kv.sock", 2, "ipc:///tmp/kv.sock_dp2"},
	} {
		if got := offsetPort(c.ep, c.i); got != c.want {
			t.Errorf("offsetPort(%q, %d) = %q, want %q", c.ep, c.i, got, c.want)
		}
	}
}
