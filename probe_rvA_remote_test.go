package kvtier

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestProbeRemoteConfigNegativeFieldsRefused: Config is "validated by New",
// and every other count or duration that must be positive is refused with
// ErrBadConfig (DiskWriteQuota, WriteQuota, HotHits...). RemoteConfig's
// WriteQuotaBytes and ReadTimeout are not checked: a negative value is
// silently replaced by the default (NewRemoteActor's "<= 0: default"), so a
// caller's mistake (a sign slip, a duration computed wrong) runs with
// settings it never asked for instead of a clear error. A WriteQuotaBytes
// smaller than one block is accepted too, and denies every write.
func TestProbeRemoteConfigNegativeFieldsRefused(t *testing.T) {
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
