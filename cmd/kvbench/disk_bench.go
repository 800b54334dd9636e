package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/kvtier/kvtier/disk"
	"golang.org/x/sys/unix"
)

// DiskResult compares the disk tier with plain positioned I/O of the same block
// size on the same file system, one goroutine each, no fdatasync on either side.
// Rates count payload bytes only: the store's 4 KiB header per block and its
// checksums are part of its cost. Each rate is the median over rounds of one
// round's rate (copyBatch blocks). The ratios are the median over rounds of
// the store's rate over the reference's in the same round: pairing the two
// cancels the drift of a shared machine's disk between rounds, which the
// ratio of the two medians keeps.
type DiskResult struct {
	Dir        string `json:"dir"`
	IOMode     string `json:"io_mode"` // the store's mode; the reference file uses the same
	BlockBytes int    `json:"block_bytes"`
	Blocks     int    `json:"blocks_per_round"`
	Rounds     int    `json:"rounds"`

	RawWriteGBps  float64 `json:"raw_write_gbps"`
	DiskWriteGBps float64 `json:"disk_write_gbps"`
	RawReadGBps   float64 `json:"raw_read_gbps"`
	DiskReadGBps  float64 `json:"disk_read_gbps"`
	WriteRatio    float64 `json:"write_ratio"` // median of per-round disk/raw write rates
	ReadRatio     float64 `json:"read_ratio"`
}

// runDisk writes and reads copyBatch blocks per round through a disk.Store
// (WriteSync/ReadSync) and through pwrite/pread on a preallocated file in the
// same directory, alternating which goes first. The store has room for two
// rounds, so from the third round on every write evicts.
func runDisk(quick bool, parent string, bb int) (_ *DiskResult, err error) {
	rounds := 24
	if quick {
		rounds = 2
	}
	dir, err := os.MkdirTemp(parent, "kvbench-disk-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if rerr := os.RemoveAll(dir); err == nil && rerr != nil {
			err = rerr
		}
	}()
	slots := 2 * copyBatch
	st, rep, err := disk.Open(disk.Config{
		Dir:           dir,
		CapacityBytes: int64(slots) * disk.SlotBytes(bb),
		PayloadBytes:  bb,
		Fingerprint:   0x6b7662656e6368, // "kvbench"
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := st.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()
	raw, err := openRaw(filepath.Join(dir, "raw-reference.dat"), rep.Mode == disk.IODirect, int64(slots*bb))
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := raw.Close(); err == nil && cerr != nil {
			err = cerr
		}
	}()

	src, err := mmapBuffer(copyBatch * bb)
	if err != nil {
		return nil, err
	}
	defer unix.Munmap(src)
	dst, err := mmapBuffer(copyBatch * bb)
	if err != nil {
		return nil, err
	}
	defer unix.Munmap(dst)
	fillRandom(src, 3)
	block := func(b []byte, i int) []byte { return b[i*bb : (i+1)*bb] }

	var hash uint64 // last hash written to the store
	pos := 0        // next slot of the raw file
	rawWrite := func() (time.Duration, error) {
		start := time.Now()
		for i := range copyBatch {
			if _, err := raw.WriteAt(block(src, i), int64((pos+i)%slots*bb)); err != nil {
				return 0, fmt.Errorf("pwrite: %w", err)
			}
		}
		return time.Since(start), nil
	}
	rawRead := func() (time.Duration, error) {
		start := time.Now()
		for i := range copyBatch {
			if _, err := raw.ReadAt(block(dst, i), int64((pos+i)%slots*bb)); err != nil {
				return 0, fmt.Errorf("pread: %w", err)
			}
		}
		return time.Since(start), nil
	}
	storeWrite := func() (time.Duration, error) {
		start := time.Now()
		for i := range copyBatch {
			h := hash + 1 + uint64(i)
			if _, _, err := st.WriteSync(disk.Meta{Hash: h, Parent: h - 1, Tokens: blockTokens}, block(src, i)); err != nil {
				return 0, fmt.Errorf("store write: %w", err)
			}
		}
		return time.Since(start), nil
	}
	storeRead := func() (time.Duration, error) {
		start := time.Now()
		for i := range copyBatch {
			if _, n, err := st.ReadSync(hash+1+uint64(i), block(dst, i)); err != nil || n != bb {
				return 0, fmt.Errorf("store read of %d: %d bytes, %v", hash+1+uint64(i), n, err)
			}
		}
		return time.Since(start), nil
	}

	var rawW, rawR, diskW, diskR, ratioW, ratioR []float64
	batchGB := float64(copyBatch*bb) / 1e9
	for round := -1; round < rounds; round++ { // round -1 warms up, untimed
		var rw, rr, dw, dr time.Duration
		if round%2 == 0 {
			if rw, err = rawWrite(); err == nil {
				if dw, err = storeWrite(); err == nil {
					if rr, err = rawRead(); err == nil {
						dr, err = storeRead()
					}
				}
			}
		} else {
			if dw, err = storeWrite(); err == nil {
				if rw, err = rawWrite(); err == nil {
					if dr, err = storeRead(); err == nil {
						rr, err = rawRead()
					}
				}
			}
		}
		if err != nil {
			return nil, err
		}
		hash += copyBatch
		pos = (pos + copyBatch) % slots
		if round >= 0 {
			rawW = append(rawW, batchGB/rw.Seconds())
			rawR = append(rawR, batchGB/rr.Seconds())
			diskW = append(diskW, batchGB/dw.Seconds())
			diskR = append(diskR, batchGB/dr.Seconds())
			ratioW = append(ratioW, rw.Seconds()/dw.Seconds())
			ratioR = append(ratioR, rr.Seconds()/dr.Seconds())
		}
	}
	return &DiskResult{
		Dir:           parentOr(parent),
		IOMode:        rep.Mode.String(),
		BlockBytes:    bb,
		Blocks:        copyBatch,
		Rounds:        rounds,
		RawWriteGBps:  median(rawW),
		DiskWriteGBps: median(diskW),
		RawReadGBps:   median(rawR),
		DiskReadGBps:  median(diskR),
		WriteRatio:    median(ratioW),
		ReadRatio:     median(ratioR),
	}, nil
}

func parentOr(dir string) string {
	if dir == "" {
		return os.TempDir()
	}
	return dir
}

// openRaw opens the reference file, with O_DIRECT when the store got it, and
// preallocates it as the store preallocates its slot files.
func openRaw(name string, direct bool, size int64) (*os.File, error) {
	flags := os.O_RDWR | os.O_CREATE | os.O_TRUNC
	if direct {
		flags |= unix.O_DIRECT
	}
	f, err := os.OpenFile(name, flags, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		if err := f.Truncate(size); err != nil {
			f.Close()
			return nil, err
		}
	}
	return f, nil
}

// mmapBuffer returns n bytes of page-aligned anonymous memory; the caller
// unmaps it.
func mmapBuffer(n int) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, fmt.Errorf("mmap %d bytes: %w", n, err)
	}
	return b, nil
}
