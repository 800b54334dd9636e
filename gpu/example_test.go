package gpu_test

import (
	"bytes"
	"context"
	"fmt"

	"github.com/kvtier/kvtier/gpu"
)

// Offload a block to pinned host memory and bring it back into another
// block, on whichever backend the build selects.
func Example() {
	l, err := gpu.NewLayout(gpu.Llama3_8B, 16)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%d KiB per token, %d MiB per block\n", l.BytesPerToken()>>10, l.BlockBytes()>>20)

	dev, err := gpu.Default()
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	tiny, _ := gpu.NewLayout(gpu.TinySpec, 4)
	arena, err := dev.NewArena(2, tiny.BlockBytes())
	if err != nil {
		panic(err)
	}
	stream, err := dev.NewStream(arena)
	if err != nil {
		panic(err)
	}
	defer stream.Close()
	host, err := dev.AllocHost(tiny.BlockBytes())
	if err != nil {
		panic(err)
	}

	// Put a marker in layer 1's V region of block 0, offload, onboard into block 1.
	off, _ := tiny.Region(1, gpu.Value)
	_ = arena.WriteBlock(0, off, []byte("kv"))
	ops := []gpu.CopyOp{{Block: 0, Host: host.Bytes()}}
	ev, err := stream.CopyD2H(ops)
	if err != nil {
		panic(err)
	}
	ops[0].Block = 1
	if _, err := stream.CopyH2D(ops); err != nil {
		panic(err)
	}
	if err := stream.Synchronize(context.Background()); err != nil {
		panic(err)
	}
	got := make([]byte, 2)
	_ = arena.ReadBlock(1, off, got)
	fmt.Println(ev.Err(), bytes.Equal(got, []byte("kv")))
	// Output:
	// 128 KiB per token, 2 MiB per block
	// <nil> true
}
