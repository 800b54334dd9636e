package blockpool

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// TestBlockIDOutOfRangePanics: every call that takes a block id panics,
// for an id outside the pool, with a "kvtier: blockpool:" assertion naming
// the id and the range (not Go's bare index error, nor a quiet zero), and
// leaves the pool as it was.
func TestBlockIDOutOfRangePanics(t *testing.T) {
	p, err := New(Config{NumBlocks: 8, BlockSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	calls := map[string]func(BlockID){
		"Pin":         p.Pin,
		"Unpin":       p.Unpin,
		"Pinned":      func(id BlockID) { p.Pinned(id) },
		"BlockHash":   func(id BlockID) { p.BlockHash(id) },
		"BlockDigest": func(id BlockID) { p.BlockDigest(id) },
		"BlockTokens": func(id BlockID) { p.BlockTokens(id) },
		"RefCount":    func(id BlockID) { p.RefCount(id) },
		"Uncache":     p.Uncache,
		"Recache":     p.Recache,
	}
	for name, call := range calls {
		for _, id := range []BlockID{-1, 8, 9, math.MaxInt32} {
			msg := func() (msg string) {
				defer func() {
					r := recover()
					if r == nil {
						msg = "no panic"
						return
					}
					s, ok := r.(string)
					if !ok {
						msg = fmt.Sprintf("a panic with %T: %v", r, r)
						return
					}
					msg = s
				}()
				call(id)
				return ""
			}()
			if want := fmt.Sprintf("block %d outside [0, 8)", id); !strings.HasPrefix(msg, "kvtier: blockpool: ") || !strings.Contains(msg, want) {
				t.Errorf("%s(%d): %s; want a kvtier: blockpool: assertion saying %q", name, id, msg, want)
			}
		}
	}
	if err := p.CheckInvariants(); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Free != 8 || s.Used != 0 {
		t.Fatalf("stats after the panics %+v", s)
	}
}

// TestTableRange: TableRange gives the positions asked for, cut at the
// table's end, and nothing for an empty or inverted range.
func TestTableRange(t *testing.T) {
	p, err := New(Config{NumBlocks: 8, BlockSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	a, err := p.Allocate(1, make([]int64, 10), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ from, to, n int }{{0, 3, 3}, {1, 2, 1}, {2, 9, 1}, {3, 3, 0}, {2, 1, 0}} {
		got, err := p.TableRange(nil, 1, c.from, c.to)
		if err != nil || len(got) != c.n || (c.n > 0 && got[0] != a.Blocks[c.from]) {
			t.Errorf("TableRange(%d, %d) = %v, %v; table %v", c.from, c.to, got, err, a.Blocks)
		}
	}
	if _, err := p.TableRange(nil, 2, 0, 1); !errors.Is(err, ErrUnknownSequence) {
		t.Errorf("TableRange of an unknown sequence: %v", err)
	}
}
