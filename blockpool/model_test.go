package blockpool

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kvtier/kvtier/prefixhash"
)

// model is the trivial reference: what each live sequence holds and reserves.
type model struct {
	seqs map[SeqID]modelSeq
	resv map[SeqID]int
	// done holds the digests of every block some sequence committed: only
	// those may ever be findable (commit before cache).
	done map[prefixhash.Digest]bool
}

type modelSeq struct {
	tokens []int64
	salt   string
}

// runOps decodes data into pool operations, applies them to a pool and the model,
// and checks both agree after every step.
func runOps(t *testing.T, data []byte) {
	const blocks, size = 24, 4
	// Digests on: the model checks findable blocks by digest.
	p, err := New(Config{NumBlocks: blocks, BlockSize: size, Digests: true})
	if err != nil {
		t.Fatal(err)
	}
	m := model{seqs: map[SeqID]modelSeq{}, resv: map[SeqID]int{}, done: map[prefixhash.Digest]bool{}}
	salts := []string{"", "", "t1"}
	var h prefixhash.Hasher
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	for len(data) > 0 {
		op, arg := next(), next()
		id := SeqID(arg % 8)
		switch op % 6 {
		case 0: // allocate: a shared stem of 0-3 blocks plus a private tail
			stem := int(next()%4) * size
			n := stem + int(next()%9)
			if n == 0 {
				n = 1
			}
			toks := make([]int64, n)
			for i := range toks {
				if i < stem {
					toks[i] = int64(i % 7)
				} else {
					toks[i] = int64(arg)*1000 + int64(i)
				}
			}
			salt := salts[int(arg)%len(salts)]
			_, exists := m.seqs[id]
			a, err := p.Allocate(id, toks, salt)
			switch {
			case exists && !errors.Is(err, ErrSequenceExists):
				t.Fatalf("allocate of live seq %d: %v", id, err)
			case errors.Is(err, ErrNoSpace):
			case err != nil && !exists:
				t.Fatalf("allocate %d: %v", id, err)
			case err == nil:
				m.seqs[id] = modelSeq{tokens: toks, salt: salt}
				if a.CachedTokens > len(toks) || a.CachedTokens%size != 0 {
					t.Fatalf("cached tokens %d for %d tokens", a.CachedTokens, len(toks))
				}
			}
		case 1: // append
			ms, live := m.seqs[id]
			err := p.MayAppend(id, int64(arg))
			switch {
			case !live && !errors.Is(err, ErrUnknownSequence):
				t.Fatalf("append to dead seq: %v", err)
			case live && err == nil:
				ms.tokens = append(ms.tokens, int64(arg))
				m.seqs[id] = ms
			case live && !errors.Is(err, ErrNoSpace):
				t.Fatalf("append: %v", err)
			}
		case 2: // deallocate
			_, live := m.seqs[id]
			err := p.Deallocate(id)
			if live != (err == nil) {
				t.Fatalf("deallocate live=%v: %v", live, err)
			}
			delete(m.seqs, id)
		case 3: // reserve
			n := int(next()%5) + 1
			_, has := m.resv[id]
			err := p.Reserve(id, n)
			switch {
			case has && !errors.Is(err, ErrReservationExists):
				t.Fatalf("second reserve: %v", err)
			case !has && err == nil:
				m.resv[id] = n
			case !has && !errors.Is(err, ErrNoSpace):
				t.Fatalf("reserve: %v", err)
			}
		case 5: // commit a random number of the sequence's tokens
			ms, live := m.seqs[id]
			n := 0
			if live {
				n = int(next()) % (len(ms.tokens) + 1)
			}
			_, err := p.Commit(id, n, nil)
			if live != (err == nil) {
				t.Fatalf("commit live=%v: %v", live, err)
			}
			if live {
				for _, d := range ComputeKeys(ms.salt, ms.tokens[:n], size, true).Digests {
					m.done[d] = true
				}
			}
		case 4: // release
			_, has := m.resv[id]
			err := p.Release(id)
			if has != (err == nil) {
				t.Fatalf("release has=%v: %v", has, err)
			}
			delete(m.resv, id)
		}
		if err := p.CheckInvariants(); err != nil {
			t.Fatal(err)
		}
		// Every live sequence holds exactly its tokens, and every full block of its
		// table carries those tokens and the chained hash of its prefix.
		st := p.Stats()
		if st.Free+st.Used+st.Reserved != blocks || st.Sequences != len(m.seqs) {
			t.Fatalf("totals %+v, model %d seqs", st, len(m.seqs))
		}
		for id, ms := range m.seqs {
			n, _ := p.NumTokens(id)
			tbl, _ := p.Table(nil, id)
			if n != len(ms.tokens) || len(tbl) != (n+size-1)/size {
				t.Fatalf("seq %d: %d tokens %d blocks, model %d tokens", id, n, len(tbl), len(ms.tokens))
			}
			chain := h.Chain(nil, ms.salt, ms.tokens, size)
			for i, want := range chain {
				b := &p.blocks[tbl[i]]
				if b.hash != want || !slices.Equal(b.tokens, ms.tokens[i*size:(i+1)*size]) {
					t.Fatalf("seq %d block %d holds other contents", id, i)
				}
			}
		}
		for i := range p.blocks {
			if p.blocks[i].cached && !m.done[p.digests[i]] {
				t.Fatalf("block %d is findable but no sequence committed its prefix", i)
			}
		}
		for id, n := range m.resv {
			if got := p.Reserved(id); got > n {
				t.Fatalf("reservation %d holds %d, model reserved %d", id, got, n)
			}
		}
	}
}

func TestModelRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		data := make([]byte, 300)
		for i := range data {
			data[i] = byte(r.IntN(256))
		}
		runOps(t, data)
	}
}

func FuzzPoolOps(f *testing.F) {
	f.Add([]byte{0, 1, 2, 5, 0, 2, 2, 5, 1, 1, 2, 1})
	f.Add([]byte{3, 1, 4, 0, 1, 3, 8, 4, 1, 2, 1})
	f.Add([]byte{0, 0, 3, 8, 0, 8, 3, 8, 2, 0, 0, 16, 3, 3, 1, 16, 4})
	f.Fuzz(func(t *testing.T, data []byte) { runOps(t, data) })
}
