package kvtier

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kvtier/kvtier/remote"
)

// TestRemoteConfigBadFieldsRefused: New refuses, with ErrBadConfig, a
// negative RemoteConfig.WriteQuotaBytes or ReadTimeout and a write quota
// below one block, as it refuses every other bad count or duration. They
// used to be taken (review of 2026-11-27): a negative value silently became
// the default, and a quota below one block denied every write for ever.
func TestRemoteConfigBadFieldsRefused(t *testing.T) {
	for _, c := range []struct {
		name string
		r    RemoteConfig
	}{
		{"WriteQuotaBytes", RemoteConfig{WriteQuotaBytes: -1}},
		{"ReadTimeout", RemoteConfig{ReadTimeout: -time.Second}},
		// Below one block (here 64 B a token x 4 tokens): every remote write
		// is denied, for ever, and the tier silently stores nothing.
		{"WriteQuotaBytes below one block", RemoteConfig{WriteQuotaBytes: 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := c.r
			r.Addrs = []string{"127.0.0.1:1"} // nothing listens: New only warns
			m, err := New(Config{GPUBlocks: 16, BlockTokens: bt, PinnedBytes: 16 * 4096, Remote: &r})
			if err == nil {
				_ = m.Close(context.Background())
			}
			if !errors.Is(err, ErrBadConfig) {
				t.Errorf("New with Remote.%s: %v, want ErrBadConfig", c.name, err)
			}
		})
	}
}

// TestDeleteWithRemoteUnreachableNotDurable: a Delete whose remote part
// fails (nothing answers at the address) returns ErrNotDurable wrapping
// remote.ErrUnavailable: other nodes may still be served the chain from
// there. (It returned a plain error, review of 2026-11-27.)
func TestDeleteWithRemoteUnreachableNotDurable(t *testing.T) {
	m, err := New(Config{GPUBlocks: 16, BlockTokens: bt, PinnedBytes: 16 * 4096,
		Remote: &RemoteConfig{Addrs: []string{"127.0.0.1:1"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	_, err = m.Delete(context.Background(), make([]int64, 2*bt), "")
	if !errors.Is(err, ErrNotDurable) || !errors.Is(err, remote.ErrUnavailable) {
		t.Fatalf("Delete with the remote tier unreachable: %v, want ErrNotDurable wrapping remote.ErrUnavailable", err)
	}
}
