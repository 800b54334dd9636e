package scheduler

import (
	"context"
	"fmt"
	"testing"

	"github.com/kvtier/kvtier/trace"
)

// BenchmarkRunSample replays the embedded Mooncake sample (600 requests,
// outputs capped) through the fake cache and reports scheduler steps per second
// of real time and the replay speed-up over the trace's logical duration.
func BenchmarkRunSample(b *testing.B) {
	reqs := trace.Sample()
	for _, out := range []int{32, 256} {
		b.Run(fmt.Sprintf("maxout=%d", out), func(b *testing.B) {
			b.ReportAllocs()
			var res Result
			for b.Loop() {
				f := newFakeCache(fakeConfig{gpuBlocks: 16384, pinnedBlocks: 16384, diskBlocks: 65536, blockSize: 64})
				var err error
				if res, err = Run(context.Background(), f, reqs, Config{MaxOutputTokens: out}); err != nil {
					b.Fatal(err)
				}
			}
			perRun := b.Elapsed().Seconds() / float64(b.N)
			b.ReportMetric(float64(res.Steps)/perRun, "steps/s")
			b.ReportMetric(res.Duration.Seconds()/perRun, "x-realtime")
		})
	}
}
