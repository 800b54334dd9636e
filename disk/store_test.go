package disk

import (
	"errors"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/kvtier/kvtier/policy"
)

func TestWriteReadRoundTrip(t *testing.T) {
	s, rep := mustOpen(t, testConfig(t, 16))
	defer mustClose(t, s)
	if rep.Records != 0 || rep.DroppedTotal() != 0 {
		t.Fatalf("fresh store report %+v", rep)
	}
	t.Logf("I/O mode: %v", s.Mode())
	for h := uint64(1); h <= 10; h++ {
		mustWrite(t, s, h)
	}
	for h := uint64(1); h <= 10; h++ {
		mustReadExact(t, s, h)
	}
	if _, _, err := s.ReadSync(99, make([]byte, testPayload)); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing hash: %v", err)
	}
	if _, _, err := s.WriteSync(metaFor(3), payloadFor(3, testPayload)); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate write: %v", err)
	}
	// An unaligned, odd-length payload and destination go through bounce buffers.
	raw := make([]byte, 1001)
	unaligned := raw[1:]
	for i := range unaligned {
		unaligned[i] = byte(i)
	}
	if _, _, err := s.WriteSync(Meta{Hash: 500}, unaligned); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 2001)[1:]
	if _, n, err := s.ReadSync(500, got); err != nil || n != 1000 || string(got[:n]) != string(unaligned) {
		t.Fatalf("unaligned round trip: n=%d err=%v", n, err)
	}
	if _, _, err := s.WriteSync(Meta{Hash: 501}, make([]byte, testPayload+1)); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("oversized payload: %v", err)
	}
	st := s.Stats()
	if st.Writes != 11 || st.Reads != 11 || st.Live != 11 || st.WriteErrors.Other != 0 || st.Free != 5 {
		t.Fatalf("stats %+v", st)
	}
	checkInv(t, s)
}

func TestFilesArePrivate(t *testing.T) {
	cfg := testConfig(t, 8)
	cfg.Files = 3
	s, _ := mustOpen(t, cfg)
	mustClose(t, s)
	ents, err := os.ReadDir(cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 4 { // LOCK + 3 slot files
		t.Fatalf("dir has %d entries, want 4", len(ents))
	}
	var total int64
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s has mode %v, want 0600", e.Name(), perm)
		}
		if e.Name() != lockFileName {
			total += fi.Size()
		}
	}
	if total != 8*SlotBytes(testPayload) {
		t.Fatalf("slot files hold %d bytes, want %d", total, 8*SlotBytes(testPayload))
	}
}

func TestRestart(t *testing.T) {
	const n = 200
	cfg := testConfig(t, 256)
	cfg.Files = 2
	s, _ := mustOpen(t, cfg)
	for h := uint64(1); h <= n; h++ {
		mustWrite(t, s, h*7919)
	}
	gen := s.Stats().NextGeneration
	mustClose(t, s)

	s, rep := mustOpen(t, cfg)
	if rep.Records != n || rep.DroppedTotal() != 0 {
		t.Fatalf("reopen report %+v, want %d records", rep, n)
	}
	if got := s.Stats().NextGeneration; got != gen {
		t.Fatalf("next generation %d after reopen, want %d", got, gen)
	}
	for h := uint64(1); h <= n; h++ {
		mustReadExact(t, s, h*7919)
	}
	checkInv(t, s)
	mustClose(t, s)

	// Another model: every record is dropped, counted and scrubbed.
	cfg.Fingerprint++
	s, rep = mustOpen(t, cfg)
	if rep.Records != 0 || rep.Dropped[DropFingerprint] != n || rep.DroppedTotal() != n {
		t.Fatalf("fingerprint change report %+v", rep)
	}
	if s.Contains(7919) {
		t.Fatal("block of the old fingerprint still served")
	}
	mustClose(t, s)
	s, rep = mustOpen(t, cfg)
	if rep.Records != 0 || rep.DroppedTotal() != 0 {
		t.Fatalf("dropped headers were not zeroed: %+v", rep)
	}
	mustClose(t, s)
}

func TestRestartKeepsNewestDuplicate(t *testing.T) {
	cfg := testConfig(t, 4)
	s, _ := mustOpen(t, cfg)
	mustWrite(t, s, 1)
	file, off, _ := s.slotLocation(1)
	mustClose(t, s)
	// Copy slot 0 (hash 1, generation 0) to slot 1, then write hash 1
	// again, newer, into slot 2 by hand: Open must keep the newest.
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	sb := SlotBytes(testPayload)
	copy(data[off+sb:off+2*sb], data[off:off+sb])
	var r record
	if decodeHeader(data[off:off+BlockSize], &r) != headerValid {
		t.Fatal("slot 0 header invalid")
	}
	r.generation = 41
	copy(data[off+2*sb+BlockSize:], data[off+BlockSize:off+sb])
	encodeHeader(data[off+2*sb:off+2*sb+BlockSize], &r)
	if err := os.WriteFile(file, data, 0o600); err != nil {
		t.Fatal(err)
	}
	s, rep := mustOpen(t, cfg)
	defer mustClose(t, s)
	if rep.Records != 1 || rep.Dropped[DropDuplicate] != 2 {
		t.Fatalf("report %+v, want 1 record and 2 duplicates dropped", rep)
	}
	if _, off2, _ := s.slotLocation(1); off2 != off+2*sb {
		t.Fatalf("kept the record at %d, want the newest at %d", off2, off+2*sb)
	}
	if g := s.Stats().NextGeneration; g != 42 {
		t.Fatalf("next generation %d, want 42", g)
	}
	mustReadExact(t, s, 1)
}

func TestRemove(t *testing.T) {
	cfg := testConfig(t, 4)
	s, _ := mustOpen(t, cfg)
	mustWrite(t, s, 1)
	mustWrite(t, s, 2)
	if err := s.RemoveSync(1); err != nil || s.Contains(1) {
		t.Fatalf("RemoveSync(1): %v", err)
	}
	wantErr(t, s.RemoveSync(1), ErrNotFound)
	checkInv(t, s)
	mustClose(t, s)
	s, rep := mustOpen(t, cfg)
	defer mustClose(t, s)
	if rep.Records != 1 || !s.Contains(2) || s.Contains(1) {
		t.Fatalf("removed block survived Close: %+v", rep)
	}
}

func TestInvalidConfig(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"no dir":     func(c *Config) { c.Dir = "" },
		"no payload": func(c *Config) { c.PayloadBytes = 0 },
		"too small":  func(c *Config) { c.CapacityBytes = 100 },
		"bad policy": func(c *Config) { c.Policy = 99 },
		"more files": func(c *Config) { c.Files = 100 },
		"neg files":  func(c *Config) { c.Files = -1 },
	} {
		t.Run(name, func(t *testing.T) {
			cfg := testConfig(t, 4)
			mut(&cfg)
			before := cfg
			if _, _, err := Open(cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Open: %v, want ErrInvalidConfig", err)
			}
			if cfg != before {
				t.Fatal("Open modified the caller's config")
			}
		})
	}
}

func TestCloseBusy(t *testing.T) {
	s, _ := mustOpen(t, testConfig(t, 4))
	mustWrite(t, s, 1)
	op, _, _ := s.PlanRead(1, digestFor(1))
	wantErr(t, s.Close(), ErrBusy)
	s.CompleteRead(op, op.Execute(make([]byte, testPayload)))
	mustClose(t, s)
	wantErr(t, s.Close(), ErrClosed)
	if _, err := s.PlanWrite(Meta{Hash: 2}); !errors.Is(err, ErrClosed) {
		t.Fatalf("PlanWrite after Close: %v", err)
	}
}

// TestModel drives the store and a map with the same random operations and
// compares them after every step; a restart happens halfway.
func TestModel(t *testing.T) {
	cfg := testConfig(t, 24)
	s, _ := mustOpen(t, cfg)
	model := map[uint64]bool{}
	r := rand.New(rand.NewPCG(1, 2))
	for step := range 1500 {
		h := uint64(r.IntN(60)) + 1
		switch op := r.IntN(10); {
		case op < 5:
			v, ev, err := s.WriteSync(metaFor(h), payloadFor(h, testPayload))
			switch {
			case model[h]:
				wantErr(t, err, ErrExists)
			case err != nil:
				t.Fatalf("step %d write %d: %v", step, h, err)
			default:
				model[h] = true
				if ev {
					if !model[v.Hash] {
						t.Fatalf("step %d: evicted %d which the model lacks", step, v.Hash)
					}
					delete(model, v.Hash)
				}
			}
		case op < 9:
			dst := AlignedBuffer(testPayload)
			_, _, err := s.ReadSyncDigest(h, digestFor(h), dst)
			if model[h] {
				if err != nil {
					t.Fatalf("step %d read %d: %v", step, h, err)
				}
				mustReadExact(t, s, h)
			} else if !errors.Is(err, ErrNotFound) {
				t.Fatalf("step %d read of absent %d: %v", step, h, err)
			}
		default:
			if err := s.RemoveSync(h); (err == nil) != model[h] || (err != nil && !errors.Is(err, ErrNotFound)) {
				t.Fatalf("step %d: RemoveSync(%d) = %v, model has it: %t", step, h, err, model[h])
			}
			delete(model, h)
		}
		if step == 750 {
			mustClose(t, s)
			s, _ = mustOpen(t, cfg)
		}
		if s.Len() != len(model) {
			t.Fatalf("step %d: store has %d blocks, model %d", step, s.Len(), len(model))
		}
		checkInv(t, s)
	}
	n := 0
	s.Range(func(m Meta) bool {
		if !model[m.Hash] || m != metaFor(m.Hash) {
			t.Errorf("Range yielded %+v", m)
		}
		n++
		return true
	})
	if n != len(model) {
		t.Fatalf("Range yielded %d, want %d", n, len(model))
	}
	mustClose(t, s)
}

// TestMissReachesOnlyAnAdaptivePolicy: only an Adaptive store learns from
// misses; a miss of a stored block, or after Close, changes nothing.
func TestMissReachesOnlyAnAdaptivePolicy(t *testing.T) {
	for k := policy.LRU; k.Valid(); k++ {
		cfg := testConfig(t, 4)
		cfg.Policy = k
		s, _ := mustOpen(t, cfg)
		if got := s.ObservesMisses(); got != (k == policy.Adaptive) {
			t.Fatalf("%v: ObservesMisses = %v", k, got)
		}
		mustWrite(t, s, 1)
		s.Miss(1)
		s.Miss(2)
		if s.Len() != 1 || !s.Contains(1) || s.Contains(2) {
			t.Fatalf("%v: after misses the store holds %d blocks (1: %v, 2: %v)", k, s.Len(), s.Contains(1), s.Contains(2))
		}
		if got, want := s.Stats().MissesObserved, int64(b2i(k == policy.Adaptive)); got != want {
			t.Fatalf("%v: %d misses observed, want %d (the held block's is not one)", k, got, want)
		}
		checkInv(t, s)
		mustClose(t, s)
		s.Miss(3)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// ErrTooLarge is about Config.PayloadBytes, not the slot's rounded-up room,
// and WriteSync rejects before it evicts anything.
func TestPayloadOverPayloadBytesRejected(t *testing.T) {
	for _, direct := range []bool{false, true} {
		cfg := testConfig(t, 2)
		cfg.PayloadBytes = 5000 // the slot holds 8192
		cfg.CapacityBytes = 2 * SlotBytes(cfg.PayloadBytes)
		cfg.NoDirectIO = !direct
		s, _ := mustOpen(t, cfg)
		for h := uint64(1); h <= 2; h++ {
			if _, _, err := s.WriteSync(Meta{Hash: h}, AlignedBuffer(100)); err != nil {
				t.Fatal(err)
			}
		}
		_, evicted, err := s.WriteSync(Meta{Hash: 7}, AlignedBuffer(6000))
		if !errors.Is(err, ErrTooLarge) || evicted || s.Contains(7) || s.Len() != 2 {
			t.Fatalf("direct=%t: 6000 bytes with PayloadBytes 5000: err %v evicted %t contains %t len %d; want ErrTooLarge and no change",
				direct, err, evicted, s.Contains(7), s.Len())
		}
		// Through the op too (a caller that plans first).
		op, err := s.PlanWrite(Meta{Hash: 8})
		if err != nil {
			t.Fatal(err)
		}
		err = op.Execute(AlignedBuffer(6000))
		s.CompleteWrite(op, err)
		if !errors.Is(err, ErrTooLarge) || s.Contains(8) {
			t.Fatalf("direct=%t: Execute of 6000 bytes: %v, contains %t", direct, err, s.Contains(8))
		}
		checkInv(t, s)
		mustClose(t, s)
	}
}
