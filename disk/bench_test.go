package disk

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const benchSlots = 32

var benchSizes = []int{256 << 10, 2 << 20}

func sizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("bytes=%dMiB", n>>20)
	}
	return fmt.Sprintf("bytes=%dKiB", n>>10)
}

func randomPayload(n int) []byte {
	p := AlignedBuffer(n)
	r := rand.New(rand.NewPCG(uint64(n), 7))
	for i := range p {
		p[i] = byte(r.Uint32())
	}
	return p
}

func benchStore(b *testing.B, size int) *Store {
	s, _, err := Open(Config{
		Dir:           b.TempDir(),
		CapacityBytes: benchSlots * SlotBytes(size),
		PayloadBytes:  size,
		Fingerprint:   1,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

func BenchmarkDiskWrite(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			s := benchStore(b, size)
			b.Logf("mode=%v", s.Mode())
			p := randomPayload(size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			h := uint64(0)
			for b.Loop() {
				h++
				if _, _, err := s.WriteSync(Meta{Hash: h}, p); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkDiskWriteWays writes each size both ways, alternating write by
// write on one store so that both see the same disk: header and payload in
// one pwritev with the checksum summed first ("vectored"), and the payload
// then its header with the checksum summed meanwhile ("split"). It reports
// each way's time per write and vectored/split; defaultSplitWriteMin comes
// from it.
func BenchmarkDiskWriteWays(b *testing.B) {
	for _, size := range []int{32 << 10, 256 << 10, 1 << 20, 2 << 20, 8 << 20} {
		b.Run(sizeName(size), func(b *testing.B) {
			s := benchStore(b, size)
			p := randomPayload(size)
			b.SetBytes(int64(size))
			var took [2]time.Duration // split, vectored
			h := uint64(0)
			for b.Loop() {
				h++
				way := int(h % 2)
				s.splitWriteMin = 0 // split
				if way == 1 {
					s.splitWriteMin = size + 1
				}
				start := time.Now()
				if _, _, err := s.WriteSync(Meta{Hash: h}, p); err != nil {
					b.Fatal(err)
				}
				took[way] += time.Since(start)
			}
			n := float64(max(h/2, 1))
			b.ReportMetric(float64(took[0].Nanoseconds())/n, "split-ns/write")
			b.ReportMetric(float64(took[1].Nanoseconds())/n, "vectored-ns/write")
			b.ReportMetric(float64(took[1])/float64(took[0]), "vectored/split")
		})
	}
}

func BenchmarkDiskRead(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			s := benchStore(b, size)
			p := randomPayload(size)
			for h := range uint64(benchSlots) {
				if _, _, err := s.WriteSync(Meta{Hash: h}, p); err != nil {
					b.Fatal(err)
				}
			}
			dst := AlignedBuffer(size)
			b.SetBytes(int64(size))
			b.ReportAllocs()
			h := uint64(0)
			for b.Loop() {
				if _, _, err := s.ReadSync(h%benchSlots, dst); err != nil {
					b.Fatal(err)
				}
				h++
			}
		})
	}
}

// rawFile opens a plain file of benchSlots blocks in a temp dir, with
// O_DIRECT when the file system allows it, as the store would.
func rawFile(b *testing.B, size int) (*os.File, string) {
	name := filepath.Join(b.TempDir(), "raw")
	mode := "direct"
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|unix.O_DIRECT, 0o600)
	if err != nil {
		mode = "buffered"
		if f, err = os.OpenFile(name, os.O_RDWR|os.O_CREATE, 0o600); err != nil {
			b.Fatal(err)
		}
	}
	b.Cleanup(func() { _ = f.Close() })
	if err := unix.Fallocate(int(f.Fd()), 0, 0, int64(benchSlots*size)); err != nil {
		b.Fatal(err)
	}
	return f, mode
}

func BenchmarkRawPwrite(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			f, mode := rawFile(b, size)
			b.Logf("mode=%s", mode)
			p := randomPayload(size)
			b.SetBytes(int64(size))
			i := 0
			for b.Loop() {
				if _, err := f.WriteAt(p, int64(i%benchSlots*size)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

func BenchmarkRawPread(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			f, _ := rawFile(b, size)
			p := randomPayload(size)
			for i := range benchSlots {
				if _, err := f.WriteAt(p, int64(i*size)); err != nil {
					b.Fatal(err)
				}
			}
			b.SetBytes(int64(size))
			i := 0
			for b.Loop() {
				if _, err := f.ReadAt(p, int64(i%benchSlots*size)); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

func BenchmarkChecksum(b *testing.B) {
	for _, size := range benchSizes {
		b.Run(sizeName(size), func(b *testing.B) {
			p := randomPayload(size)
			b.SetBytes(int64(size))
			var sink uint64
			for b.Loop() {
				sink += Checksum(p)
			}
			_ = sink
		})
	}
}

// BenchmarkReopen measures Open (header scan and index rebuild) of a store
// holding blocks records of 4 KiB payload (8 KiB slots).
func BenchmarkReopen(b *testing.B) {
	for _, blocks := range []int{10_000} {
		b.Run(fmt.Sprintf("blocks=%d", blocks), func(b *testing.B) {
			cfg := Config{
				Dir:           b.TempDir(),
				CapacityBytes: int64(blocks) * SlotBytes(4096),
				PayloadBytes:  4096,
				Fingerprint:   1,
			}
			fillStore(b, cfg, blocks)
			for b.Loop() {
				s, rep, err := Open(cfg)
				if err != nil {
					b.Fatal(err)
				}
				if rep.Records != blocks {
					b.Fatalf("reopened %d records, want %d", rep.Records, blocks)
				}
				b.StopTimer()
				if err := s.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(b.Elapsed())/float64(b.N)/float64(time.Millisecond), "ms/open")
		})
	}
}

func fillStore(b *testing.B, cfg Config, blocks int) {
	s, _, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	p := randomPayload(cfg.PayloadBytes)
	for h := range uint64(blocks) {
		if _, _, err := s.WriteSync(Meta{Hash: h + 1, Tokens: 16}, p); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
}
