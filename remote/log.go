package remote

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// redisLog forwards go-redis's process-wide log to the zap logger last given
// to routeRedisLog.
type redisLog struct{ to atomic.Pointer[zap.Logger] }

func (l *redisLog) Printf(_ context.Context, format string, v ...any) {
	if z := l.to.Load(); z != nil {
		z.Debug(fmt.Sprintf(format, v...), zap.String("from", "go-redis"))
	}
}

var (
	theRedisLog redisLog
	routeOnce   sync.Once
)

// routeRedisLog sends go-redis's messages to z from now on.
func routeRedisLog(z *zap.Logger) {
	theRedisLog.to.Store(z)
	routeOnce.Do(func() { redis.SetLogger(&theRedisLog) })
}
