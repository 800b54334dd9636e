package disk_test

import (
	"fmt"
	"os"

	"github.com/kvtier/kvtier/disk"
	"github.com/kvtier/kvtier/policy"
)

func Example() {
	dir, err := os.MkdirTemp("", "kvtier-disk-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	cfg := disk.Config{
		Dir:           dir,
		CapacityBytes: 4 * disk.SlotBytes(64<<10),
		PayloadBytes:  64 << 10,
		Fingerprint:   0x1234,
		Policy:        policy.LRU,
	}
	st, _, err := disk.Open(cfg)
	if err != nil {
		panic(err)
	}

	// Plan on the owner goroutine, execute anywhere, complete on the owner.
	payload := disk.AlignedBuffer(64 << 10)
	copy(payload, "hello, kv cache")
	op, err := st.PlanWrite(disk.Meta{Hash: 42, Tokens: 16})
	if err != nil {
		panic(err)
	}
	st.CompleteWrite(op, op.Execute(payload))

	// Second opener of the same directory.
	_, _, err = disk.Open(cfg)
	fmt.Println("second open locked:", err != nil)
	if err := st.Close(); err != nil {
		panic(err)
	}

	// After a restart the block is still there and verifies.
	st, rep, err := disk.Open(cfg)
	if err != nil {
		panic(err)
	}
	defer st.Close()
	dst := disk.AlignedBuffer(64 << 10)
	m, n, err := st.ReadSync(42, dst)
	fmt.Println(rep.Records, m.Tokens, n, string(dst[:15]), err)
	// Output:
	// second open locked: true
	// 1 16 65536 hello, kv cache <nil>
}
