package policy

import (
	"math/rand/v2"
	"strconv"
	"testing"
)

var benchKinds = []Kind{LRU, FIFO, S3FIFO, ARC, Adaptive}

// BenchmarkChurn measures one Evict plus one Add of a new key on a full
// policy: the steady state of a tier under a scan.
func BenchmarkChurn(b *testing.B) {
	for _, kind := range benchKinds {
		for _, capacity := range []int{1 << 10, 1 << 16} {
			b.Run("policy="+kind.String()+"/capacity="+strconv.Itoa(capacity), func(b *testing.B) {
				p := mustNew(b, kind, capacity)
				for k := range Key(capacity) {
					p.Add(k)
				}
				next := Key(capacity)
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if _, ok := p.Evict(nil); !ok {
						b.Fatal("Evict failed on a full policy")
					}
					p.Add(next)
					next++
				}
			})
		}
	}
}

// BenchmarkAccessHeavy measures a skewed workload where most operations hit a
// resident key (Zipf 1.1 over 4x the capacity), the rest miss and replace a
// victim; the hit ratio is reported too.
func BenchmarkAccessHeavy(b *testing.B) {
	const capacity, keySpace = 1 << 12, 1 << 14
	zipf := rand.NewZipf(rand.New(rand.NewPCG(3, 4)), 1.1, 1, keySpace-1)
	keys := make([]Key, 1<<16)
	for i := range keys {
		keys[i] = zipf.Uint64()
	}
	for _, kind := range benchKinds {
		b.Run("policy="+kind.String(), func(b *testing.B) {
			p := mustNew(b, kind, capacity)
			hits, i := 0, 0
			b.ReportAllocs()
			for b.Loop() {
				k := keys[i&(len(keys)-1)]
				i++
				if p.Contains(k) {
					p.Access(k)
					hits++
					continue
				}
				if p.Len() == capacity {
					p.Evict(nil)
				}
				p.Add(k)
			}
			b.ReportMetric(float64(hits)/float64(i), "hit-ratio")
		})
	}
}
