package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/kvtier/kvtier/remote"
)

// RemoteResult is the remote suite: the shared tier's write and read
// throughput against plain pipelined SET/GET of the same bytes, in the same
// value sizes, on the same server, interleaved round by round; and the round
// trips one prefix lookup costs.
type RemoteResult struct {
	Server     string  `json:"server"`
	Cluster    bool    `json:"cluster"`
	Blocks     int     `json:"blocks"`      // per round
	BlockBytes int     `json:"block_bytes"` // payload of one block
	ChunkBytes int     `json:"chunk_bytes"`
	Rounds     int     `json:"rounds"`
	PutGBps    float64 `json:"put_gbps"`     // remote.Store.Put of blocks not stored: EXISTS, then chunks and commit records
	RawSetGBps float64 `json:"raw_set_gbps"` // one pipeline of SET of the same chunks
	GetGBps    float64 `json:"get_gbps"`     // remote.Store.Get: records, verify, chunks, verify, copy
	RawGetGBps float64 `json:"raw_get_gbps"` // one pipeline of GET of the same chunks
	// LookupRoundTrips is the round trips counted for one lookup of a chain
	// of Blocks blocks (the tier's promise: 1).
	LookupRoundTrips float64 `json:"lookup_round_trips"`
}

// pipelines counts pipelines and commands sent, connection handshakes aside.
type pipelines struct{ n int }

func (p *pipelines) DialHook(next redis.DialHook) redis.DialHook { return next }
func (p *pipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := cmd.Name(); n != "hello" && n != "client" {
			p.n++
		}
		return next(ctx, cmd)
	}
}
func (p *pipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) > 0 && cmds[0].Name() != "hello" && cmds[0].Name() != "client" {
			p.n++
		}
		return next(ctx, cmds)
	}
}

func runRemote(quick bool, addrs []string, cluster bool) (*RemoteResult, error) {
	ctx := context.Background()
	r := &RemoteResult{Server: fmt.Sprint(addrs), Cluster: cluster, Blocks: 64, BlockBytes: 2 << 20, ChunkBytes: 1 << 20, Rounds: 5}
	if quick {
		r.Blocks, r.Rounds = 16, 2
	}
	prefix := fmt.Sprintf("kvbench-%d", rand.Uint64())
	s, err := remote.Open(ctx, remote.Config{Addrs: addrs, Cluster: cluster, Prefix: prefix, TTL: 10 * time.Minute,
		ChunkBytes: r.ChunkBytes, PayloadBytes: r.BlockBytes, Fingerprint: 1})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	raw := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: addrs, IsClusterMode: cluster})
	defer raw.Close()
	blocks := make([]remote.Block, r.Blocks)
	items := make([]remote.GetItem, r.Blocks)
	keys := make([]remote.Key, r.Blocks)
	rng := rand.NewChaCha8([32]byte{1})
	for i := range blocks {
		b := &blocks[i]
		_, _ = rng.Read(b.Digest[:])
		b.Hash, b.Tokens = rng.Uint64(), 512
		b.Payload = make([]byte, r.BlockBytes)
		_, _ = rng.Read(b.Payload)
		items[i] = remote.GetItem{Key: b.Key, Hash: b.Hash, Dst: make([]byte, r.BlockBytes)}
		keys[i] = b.Key
	}
	bytes := float64(r.Blocks * r.BlockBytes)
	var put, set, get, rawGet []float64
	var rawKeys []string
	for i, b := range blocks {
		for c := 0; c*r.ChunkBytes < len(b.Payload); c++ {
			rawKeys = append(rawKeys, prefix+":raw:"+strconv.Itoa(i)+":"+strconv.Itoa(c))
		}
	}
	for range r.Rounds {
		// Untimed: both writes below store keys the server does not hold
		// (one DEL a key: a cluster refuses keys of several slots in one).
		pipe := raw.Pipeline()
		for _, k := range rawKeys {
			pipe.Del(ctx, k)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("delete before the round's SET: %w", err)
		}
		t0 := time.Now()
		pipe = raw.Pipeline()
		for i, b := range blocks {
			for c := 0; c*r.ChunkBytes < len(b.Payload); c++ {
				part := b.Payload[c*r.ChunkBytes : min((c+1)*r.ChunkBytes, len(b.Payload))]
				pipe.Set(ctx, rawKeys[i*((r.BlockBytes+r.ChunkBytes-1)/r.ChunkBytes)+c], part, 10*time.Minute)
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("raw SET: %w", err)
		}
		set = append(set, bytes/time.Since(t0).Seconds()/1e9)

		// Untimed: a Put leaves blocks already stored as they are, so each
		// round writes blocks the tier does not hold.
		if _, err := s.Delete(ctx, keys); err != nil {
			return nil, fmt.Errorf("delete before the round's put: %w", err)
		}
		t0 = time.Now()
		for i, err := range s.Put(ctx, blocks) {
			if err != nil {
				return nil, fmt.Errorf("put block %d: %w", i, err)
			}
		}
		put = append(put, bytes/time.Since(t0).Seconds()/1e9)

		t0 = time.Now()
		for i, o := range s.Get(ctx, items) {
			if o != remote.Hit {
				return nil, fmt.Errorf("get block %d: %v", i, o)
			}
		}
		get = append(get, bytes/time.Since(t0).Seconds()/1e9)

		t0 = time.Now()
		pipe = raw.Pipeline()
		var cmds []*redis.StringCmd
		for i, b := range blocks {
			for c := 0; c*r.ChunkBytes < len(b.Payload); c++ {
				cmds = append(cmds, pipe.Get(ctx, prefix+":raw:"+strconv.Itoa(i)+":"+strconv.Itoa(c)))
			}
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return nil, fmt.Errorf("raw GET: %w", err)
		}
		for _, c := range cmds {
			if _, err := c.Bytes(); err != nil {
				return nil, fmt.Errorf("raw GET: %w", err)
			}
		}
		rawGet = append(rawGet, bytes/time.Since(t0).Seconds()/1e9)
	}
	r.PutGBps, r.RawSetGBps, r.GetGBps, r.RawGetGBps = median(put), median(set), median(get), median(rawGet)
	count := &pipelines{}
	s.AddHook(count)
	if n, err := s.Lookup(ctx, keys); err != nil || n != len(keys) {
		return nil, fmt.Errorf("lookup found %d of %d: %v", n, len(keys), err)
	}
	r.LookupRoundTrips = float64(count.n)
	_, _ = s.Delete(ctx, keys)
	for i, b := range blocks {
		for c := 0; c*r.ChunkBytes < len(b.Payload); c++ {
			raw.Del(ctx, prefix+":raw:"+strconv.Itoa(i)+":"+strconv.Itoa(c))
		}
	}
	return r, nil
}
