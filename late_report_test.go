package kvtier

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kvtier/kvtier/disk"
)

// slowReads is the OS file system with every disk read slowed by d, once
// on: a disk too slow for the read deadline.
type slowReads struct {
	disk.OSFS
	d  time.Duration
	on atomic.Bool
}

func (s *slowReads) OpenFile(name string, direct bool) (disk.File, error) {
	f, err := s.OSFS.OpenFile(name, direct)
	if err != nil {
		return nil, err
	}
	return &slowFile{File: f, s: s}, nil
}

type slowFile struct {
	disk.File
	s *slowReads
}

func (f *slowFile) wait() {
	if f.s.on.Load() {
		time.Sleep(f.s.d)
	}
}

func (f *slowFile) ReadAt(p []byte, off int64) (int, error) {
	f.wait()
	return f.File.ReadAt(p, off)
}

// ReadvAt keeps the store's one-preadv read path.
func (f *slowFile) ReadvAt(bufs [][]byte, off int64) (int, error) {
	f.wait()
	return f.File.(disk.VectoredReader).ReadvAt(bufs, off)
}

// TestReportLateDiskLoads reloads a 6-block prompt that only the disk holds,
// each read taking 4 ms (the disk actor's four workers read it in two
// rounds), under load deadlines of 5 to 13 ms, and prints how many blocks
// count: those copied up before the deadline. A first late load of another
// prompt comes before each, so that the GPU tier has measured how late the
// answer of a read cut at its deadline arrives. It times real reads and
// messages (wall clock), so it reports and asserts nothing; it runs only
// with KVTIER_LATE_REPORT=1:
//
//	KVTIER_LATE_REPORT=1 go test -run TestReportLateDiskLoads -v .
func TestReportLateDiskLoads(t *testing.T) {
	if os.Getenv("KVTIER_LATE_REPORT") != "1" {
		t.Skip("set KVTIER_LATE_REPORT=1 to print the late-load table")
	}
	ctx := context.Background()
	const runs = 20
	t.Logf("| load deadline | blocks valid (of 6) | blocks late | answer lag, µs |")
	for _, dl := range []time.Duration{5, 7, 9, 11, 13} {
		dl *= time.Millisecond
		valid, late, lag := 0, 0, 0.0
		for range runs {
			fs := &slowReads{d: 4 * time.Millisecond}
			cfg := diskConfig(t, t.TempDir())
			cfg.DiskFS = fs
			m := newManager(t, cfg)
			load := func(seq uint64, tokens []int64) OnboardOutcome {
				pushDown(t, m, tokens)
				fs.on.Store(true)
				defer fs.on.Store(false)
				r, err := m.Allocate(ctx, AllocRequest{Seq: seq, Tokens: tokens, LoadDeadline: time.Now().Add(dl)})
				if err != nil {
					t.Fatal(err)
				}
				return wait(t, r)
			}
			load(2, toks(500, 6*bt))
			if err := commitFree(ctx, m, 2); err != nil {
				t.Fatal(err)
			}
			out := load(3, toks(100, 6*bt))
			valid += out.ValidTokens / bt
			late += out.Late
			st, err := m.Stats(ctx)
			if err != nil {
				t.Fatal(err)
			}
			lag += st.Tier(GPU).Extra["answer_lag_us"]
			if err := m.Close(ctx); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("| %v | %.1f | %.1f | %.0f |", dl, float64(valid)/runs, float64(late)/runs, lag/runs)
	}
}
