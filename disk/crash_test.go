package disk

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

const (
	crashDirEnv   = "KVTIER_DISK_CRASH_DIR"
	crashSlots    = 64
	crashAcksWant = 300
)

func crashConfig(dir string) Config {
	return Config{
		Dir:           dir,
		CapacityBytes: crashSlots * SlotBytes(testPayload),
		PayloadBytes:  testPayload,
		Fingerprint:   0xc0ffee,
		Files:         2,
	}
}

// crashHash is the i-th block the child writes.
func crashHash(i uint64) uint64 { return i*0x9e3779b97f4a7c15 + 1 }

// TestCrashChild is the helper process of TestCrashConsistency: it writes
// blocks forever, printing "E <hash>" before an evicted block's slot is
// touched and "A <hash>" once a write is acknowledged, until it is killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashDirEnv)
	if dir == "" {
		t.Skip("helper process for TestCrashConsistency")
	}
	s, _, err := Open(crashConfig(dir))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	out := os.Stdout
	// Bounded so an orphaned child cannot run for ever.
	for i := uint64(0); i < 1_000_000 && os.Getppid() != 1; i++ {
		h := crashHash(i)
		op, err := s.PlanWrite(metaFor(h))
		if err != nil {
			fmt.Fprintln(os.Stderr, "child plan:", err)
			os.Exit(2)
		}
		if v, ok := op.Victim(); ok {
			fmt.Fprintf(out, "E %016x\n", v.Hash)
		}
		err = op.Execute(payloadFor(h, testPayload))
		s.CompleteWrite(op, err)
		if err != nil {
			fmt.Fprintln(os.Stderr, "child write:", err)
			os.Exit(2)
		}
		fmt.Fprintf(out, "A %016x\n", h)
	}
	os.Exit(0)
}

func TestCrashConsistency(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a child process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashDirEnv+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[uint64]bool{}
	acks := 0
	sc := bufio.NewScanner(stdout)
	for acks < crashAcksWant && sc.Scan() {
		line := sc.Text()
		if len(line) != 18 {
			continue // a line cut short by the kill
		}
		h, err := strconv.ParseUint(line[2:], 16, 64)
		if err != nil {
			t.Fatalf("child printed %q", line)
		}
		switch line[0] {
		case 'A':
			acked[h] = true
			acks++
		case 'E':
			delete(acked, h)
		}
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Drain what the child printed before it died: evictions planned after
	// our last read must still be honoured, and late acks are a bonus.
	for sc.Scan() {
		line := sc.Text()
		if len(line) != 18 {
			continue
		}
		h, err := strconv.ParseUint(line[2:], 16, 64)
		if err != nil {
			continue
		}
		if line[0] == 'E' {
			delete(acked, h)
		}
	}
	_ = cmd.Wait()
	if acks < crashAcksWant {
		t.Fatalf("child acknowledged only %d writes; stderr: %s", acks, strings.TrimSpace(stderr.String()))
	}

	s, rep := mustOpen(t, crashConfig(dir))
	defer mustClose(t, s)
	t.Logf("after kill: %d acked and live, report %+v", len(acked), rep)
	for h := range acked {
		mustReadExact(t, s, h)
	}
	// Every block the store serves is one the child wrote, byte-exact.
	written := map[uint64]bool{}
	for i := uint64(0); i < uint64(acks)+1000; i++ {
		written[crashHash(i)] = true
	}
	var served []uint64
	s.Range(func(m Meta) bool { served = append(served, m.Hash); return true })
	for _, h := range served {
		if !written[h] {
			t.Fatalf("store serves unknown hash %x", h)
		}
		dst := AlignedBuffer(testPayload)
		m, n, err := s.ReadSyncDigest(h, digestFor(h), dst)
		if err != nil {
			continue // detected and dropped: never served
		}
		if m != metaFor(h) || !bytes.Equal(dst[:n], payloadFor(h, testPayload)) {
			t.Fatalf("store served a bad record for %x", h)
		}
	}
	checkInv(t, s)
}
