package pinned_test

import (
	"errors"
	"fmt"
	"os"

	"github.com/kvtier/kvtier/pinned"
	"github.com/kvtier/kvtier/policy"
)

func Example() {
	pool, err := pinned.New(pinned.Config{
		CapacityBytes: 2 * int64(os.Getpagesize()), // two slots
		SlotBytes:     os.Getpagesize(),
		Policy:        policy.FIFO,
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()

	store := func(k pinned.Key, block string) {
		slot, err := pool.Reserve(k)
		if errors.Is(err, pinned.ErrNoSpace) {
			for _, v := range pool.Evict(1) {
				fmt.Printf("evicted %d: %s\n", v.Key, pool.Bytes(v.Slot)[:len(block)]) // copy to disk here
				pool.Free(v.Slot)
			}
			slot, err = pool.Reserve(k)
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		copy(pool.Bytes(slot), block)
		pool.Commit(slot)
	}
	store(1, "one")
	store(2, "two")
	store(3, "six")

	if slot, ok := pool.Acquire(3); ok {
		fmt.Printf("hit 3: %s\n", pool.Bytes(slot)[:3])
		pool.Release(slot)
	}
	st := pool.Stats()
	fmt.Println(st.Resident, st.Hits, st.Evictions)
	// Output:
	// evicted 1: one
	// hit 3: six
	// 2 1 1
}
