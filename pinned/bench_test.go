package pinned

import (
	"errors"
	"strconv"
	"testing"

	"github.com/kvtier/kvtier/policy"
)

// BenchmarkChurn measures one put into a full pool: Reserve fails with
// ErrNoSpace, Evict picks a victim, Free returns it, Reserve and Commit
// take its slot. Every fourth put also reads a recent key (Acquire+Release).
func BenchmarkChurn(b *testing.B) {
	for _, kind := range []policy.Kind{policy.LRU, policy.FIFO, policy.S3FIFO} {
		for _, slots := range []int{1 << 10, 1 << 14} {
			b.Run("policy="+kind.String()+"/slots="+strconv.Itoa(slots), func(b *testing.B) {
				p := newPool(b, slots, 64, kind)
				for k := range Key(slots) {
					put(b, p, k)
				}
				buf := make([]Victim, 0, 1)
				next := Key(slots)
				b.ReportAllocs()
				for b.Loop() {
					slot, err := p.Reserve(next)
					if errors.Is(err, ErrNoSpace) {
						v := p.AppendEvict(buf[:0], 1)
						if len(v) != 1 {
							b.Fatal("nothing evictable in a full pool")
						}
						p.Free(v[0].Slot)
						slot, err = p.Reserve(next)
					}
					if err != nil {
						b.Fatal(err)
					}
					p.Commit(slot)
					if next%4 == 0 {
						r, ok := p.Acquire(next - 2)
						if ok {
							p.Release(r)
						}
					}
					next++
				}
			})
		}
	}
}
