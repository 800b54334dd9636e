package pinned

import (
	"testing"

	"github.com/kvtier/kvtier/policy"
)

// Each corruption of a healthy pool must be reported by CheckInvariants.
func TestCheckInvariantsFindsCorruption(t *testing.T) {
	corruptions := map[string]func(p *Pool){
		"count":              func(p *Pool) { p.count[StateFree]++ },
		"free list dup":      func(p *Pool) { p.free = append(p.free, p.free[0]) },
		"free list resident": func(p *Pool) { p.free[0] = 0 },
		"index missing":      func(p *Pool) { delete(p.index, 1) },
		"index wrong slot":   func(p *Pool) { p.index[1] = 1 },
		"policy missing":     func(p *Pool) { p.pol.Remove(1) },
		"policy extra":       func(p *Pool) { p.pol.Add(99) },
		"filling in policy":  func(p *Pool) { p.pol.Add(2) },
		"readers on free":    func(p *Pool) { p.slots[3].refs = 1; p.refs++ },
		"reader total":       func(p *Pool) { p.refs++ },
		"doomed no readers":  func(p *Pool) { p.count[StateResident]--; p.count[StateDoomed]++; p.slots[0].state = StateDoomed },
		"bad state":          func(p *Pool) { p.slots[3].state = 0 },
	}
	for name, corrupt := range corruptions {
		t.Run(name, func(t *testing.T) {
			p := newPool(t, 4, 64, policy.S3FIFO)
			put(t, p, 1) // slot 0
			if _, err := p.Reserve(2); err != nil {
				t.Fatal(err)
			}
			mustCheck(t, p)
			corrupt(p)
			if err := p.CheckInvariants(); err == nil {
				t.Fatal("corruption not reported")
			}
		})
	}
}
