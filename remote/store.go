package remote

import (
	"context"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/cespare/xxhash/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Errors callers branch on.
var (
	// ErrBadConfig: a Config field is invalid; the detail names it.
	ErrBadConfig = errors.New("kvtier: remote: bad config")
	// ErrCorrupt: a stored record or chunk failed verification. Readers
	// see it as a miss (Corrupt), never as data.
	ErrCorrupt = errors.New("kvtier: remote: corrupt record")
	// ErrBadBlock: a Block given to Put is not one this Store stores: a
	// payload not PayloadBytes long, or a zero digest (every such block
	// would share one key per namespace, told apart by a 64-bit hash only).
	ErrBadBlock = errors.New("kvtier: remote: bad block")
	// ErrUnavailable: Redis could not be reached or answered an error.
	ErrUnavailable = errors.New("kvtier: remote: server unavailable")
)

// Config configures a Store.
type Config struct {
	// Addrs are the server addresses ("host:port"). One address is a
	// standalone server unless Cluster is set; several are a Redis Cluster
	// (Cluster is set for them).
	Addrs    []string
	Cluster  bool
	Username string
	Password string
	TLS      *tls.Config // nil: plain TCP
	// Prefix starts every key (default "kvtier"), so that several
	// deployments can share one server.
	Prefix string
	// TTL bounds how long a block stays (default 1h); Redis's maxmemory
	// policy may evict it sooner. Chunks live a minute longer than their
	// commit record, so a record never outlives its chunks by expiry.
	TTL time.Duration
	// ChunkBytes is the size of each value a payload is cut into (default
	// 1 MiB): chunks spread a block over the cluster's slots.
	ChunkBytes int
	// PayloadBytes is the size of every block (required).
	PayloadBytes int
	// Fingerprint names the block format (model shape, block size, hash
	// scheme, model id): it is in every key and record, so stores of
	// another format never meet.
	Fingerprint uint64
	// DialTimeout bounds connecting (default 1s). Reads and writes are
	// bounded by the callers' contexts.
	DialTimeout time.Duration
	// Log, when set, receives go-redis's own messages (failed dials and the
	// like) at Debug level instead of the standard logger. go-redis has one
	// logger per process: the latest Store given a Log gets them all.
	Log *zap.Logger
}

func (c Config) withDefaults() (Config, error) {
	var errs []error
	bad := func(f string, v any, why string) {
		errs = append(errs, fmt.Errorf("%w: %s %v: %s", ErrBadConfig, f, v, why))
	}
	if len(c.Addrs) == 0 {
		bad("Addrs", c.Addrs, "at least one server address is required")
	}
	// The client is a cluster client for several addresses, whose pipelines
	// run their nodes' parts in parallel: Put must write the records after
	// the chunks land, in a second round trip.
	c.Cluster = c.Cluster || len(c.Addrs) > 1
	if c.Prefix == "" {
		c.Prefix = "kvtier"
	}
	if c.TTL == 0 {
		c.TTL = time.Hour
	} else if c.TTL < time.Second {
		bad("TTL", c.TTL, "must be >= 1s")
	}
	if c.ChunkBytes == 0 {
		c.ChunkBytes = 1 << 20
	} else if c.ChunkBytes < 0 || c.ChunkBytes > 512<<20 {
		bad("ChunkBytes", c.ChunkBytes, "must be in [1, 512 MiB]")
	}
	if c.PayloadBytes <= 0 {
		bad("PayloadBytes", c.PayloadBytes, "must be >= 1")
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = time.Second
	} else if c.DialTimeout < 0 {
		bad("DialTimeout", c.DialTimeout, "must be >= 0")
	}
	return c, errors.Join(errs...)
}

// Store is a remote tier on Redis, standalone or cluster. Its methods are
// synchronous, safe for concurrent use (the client is), and bounded by
// their contexts: a slow or absent server makes them fail with the
// context's error or ErrUnavailable, never hang. A Store keeps no state of
// its own: Redis is the index, and what it loses (eviction, FLUSHALL, a
// node gone) is a miss.
type Store struct {
	cfg    Config
	c      redis.UniversalClient
	chunks int // per block
	ns     string
}

// New validates cfg and returns a Store that connects on first use: a
// server that is down now is a miss for every call until it is back.
func New(cfg Config) (*Store, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if c.Log != nil {
		routeRedisLog(c.Log)
	}
	cl := redis.NewUniversalClient(&redis.UniversalOptions{
		Addrs: c.Addrs, IsClusterMode: c.Cluster, Username: c.Username, Password: c.Password, TLSConfig: c.TLS,
		DialTimeout: c.DialTimeout, ContextTimeoutEnabled: true, MaxRetries: 1,
		// One dial per attempt: a node that refuses connections is a miss
		// now, not five backed-off dials that hold the whole pipeline,
		// the live nodes' answers included, until the caller's deadline.
		DialerRetries: 1,
	})
	// The layout (record version, payload and chunk sizes) is in every key
	// beside the fingerprint: stores laid out otherwise never meet, so a
	// record this Store cannot read under its own key is damage, deleted,
	// never a peer's intact block read another way.
	return &Store{cfg: c, c: cl, chunks: (c.PayloadBytes + c.ChunkBytes - 1) / c.ChunkBytes,
		ns: fmt.Sprintf("%s:%016x:v%d:%d:%d:", c.Prefix, c.Fingerprint, recVersion, c.PayloadBytes, c.ChunkBytes)}, nil
}

// Open is New, then checks the server answers within the dial timeout.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	s, err := New(cfg)
	if err != nil {
		return nil, err
	}
	if err := s.Ping(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// Ping checks the server answers within the dial timeout.
func (s *Store) Ping(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
	defer cancel()
	if err := s.c.Ping(pctx).Err(); err != nil {
		return fmt.Errorf("%w: ping %v: %w", ErrUnavailable, s.cfg.Addrs, err)
	}
	return nil
}

// Close closes the connections.
func (s *Store) Close() error { return s.c.Close() }

// Config returns the Store's configuration, defaults filled in.
func (s *Store) Config() Config { return s.cfg }

// Key names a block: its namespace id and prefix digest (which covers the
// namespace and every token of the prefix).
type Key struct {
	Namespace uint64
	Digest    [32]byte
}

func (s *Store) recordKey(k Key) string {
	return s.ns + strconv.FormatUint(k.Namespace, 16) + ":r:" + hex.EncodeToString(k.Digest[:])
}

// chunkKey spreads a block's chunks over cluster slots: no hash tag.
func (s *Store) chunkKey(k Key, i int) string {
	return s.ns + strconv.FormatUint(k.Namespace, 16) + ":c:" + hex.EncodeToString(k.Digest[:]) + ":" + strconv.Itoa(i)
}

// Block is one block to store.
type Block struct {
	Key
	Hash    uint64
	Tokens  int
	Payload []byte // PayloadBytes long; read only during Put
}

// Put stores blocks and returns one error per block (nil: stored). A
// block whose commit record and chunks are all there already (another node
// stored it) is left as it is and reported stored: rewriting its chunks
// under a live record would make it unreadable for a while, or for good if
// the rewrite failed half-way. This costs one round trip of EXISTS first
// (a record whose chunk was evicted is written again). Then, on a
// standalone server, every chunk and then every commit record go in one
// pipelined round trip: the server runs a connection's commands in order,
// so no reader finds a record before its chunks; a block a chunk of which
// failed to land gets an error and its record, if this Put's was set and is
// still there, is deleted (a reader that meets it first finds a chunk
// missing: a Corrupt miss). On a cluster, whose nodes run a pipeline's parts
// in parallel, the records go in a second round trip, only for blocks
// whose chunks all landed.
func (s *Store) Put(ctx context.Context, blocks []Block) []error {
	return s.put(ctx, blocks, make([]bool, len(blocks)))
}

// PutSent is Put, and also says which blocks it sent to the server:
// sent[i] is false for a block reported stored because the server held it
// already (nothing of it crossed the network), and for a failed one.
func (s *Store) PutSent(ctx context.Context, blocks []Block) (errs []error, sent []bool) {
	sent = make([]bool, len(blocks))
	errs = s.put(ctx, blocks, sent)
	for i := range sent {
		sent[i] = sent[i] && errs[i] == nil
	}
	return errs, sent
}

// put is Put; it sets write[i] for each block it sends (len(blocks) long).
func (s *Store) put(ctx context.Context, blocks []Block, write []bool) []error {
	single := !s.cfg.Cluster
	errs := make([]error, len(blocks))
	cb := s.cfg.ChunkBytes
	pipe := s.c.Pipeline()
	exists := make([][]*redis.IntCmd, len(blocks)) // the record's, then each chunk's
	for i, b := range blocks {
		if len(b.Payload) != s.cfg.PayloadBytes {
			errs[i] = fmt.Errorf("%w: payload of %d bytes, blocks are %d", ErrBadBlock, len(b.Payload), s.cfg.PayloadBytes)
			continue
		}
		if b.Digest == ([32]byte{}) {
			errs[i] = fmt.Errorf("%w: block %016x has a zero digest", ErrBadBlock, b.Hash)
			continue
		}
		exists[i] = append(exists[i], pipe.Exists(ctx, s.recordKey(b.Key)))
		for c := range s.chunks {
			exists[i] = append(exists[i], pipe.Exists(ctx, s.chunkKey(b.Key, c)))
		}
	}
	if pipe.Len() == 0 {
		return errs
	}
	_, _ = pipe.Exec(ctx)
	for i, cmds := range exists {
		for _, c := range cmds {
			// Stored means the record and every chunk are there: a record
			// whose chunk Redis evicted is a miss for every reader until
			// one deletes it, so it is written again.
			n, err := c.Result()
			if err != nil {
				errs[i], write[i] = unavailable(err), false
				break
			}
			if n == 0 {
				write[i] = true
			}
		}
	}
	pipe = s.c.Pipeline()
	cmds := make([][]*redis.StatusCmd, len(blocks))
	recs := make([][]byte, len(blocks))
	for i, b := range blocks {
		if !write[i] {
			continue
		}
		r := record{Fingerprint: s.cfg.Fingerprint, Namespace: b.Namespace, Digest: b.Digest, Hash: b.Hash,
			Tokens: uint32(b.Tokens), ChunkBytes: uint32(cb), PayloadLen: uint64(len(b.Payload)), Sums: make([]uint64, s.chunks)}
		for c := range s.chunks {
			part := b.Payload[c*cb : min((c+1)*cb, len(b.Payload))]
			r.Sums[c] = xxhash.Sum64(part)
			cmds[i] = append(cmds[i], pipe.Set(ctx, s.chunkKey(b.Key, c), part, s.cfg.TTL+time.Minute))
		}
		recs[i] = r.encode()
	}
	if pipe.Len() == 0 {
		return errs
	}
	var rcmds []*redis.StatusCmd
	if single {
		rcmds = make([]*redis.StatusCmd, len(blocks))
		for i, b := range blocks {
			if write[i] {
				rcmds[i] = pipe.Set(ctx, s.recordKey(b.Key), recs[i], s.cfg.TTL)
			}
		}
	}
	_, _ = pipe.Exec(ctx) // errors are per command
	if single {
		return s.checkPut(ctx, blocks, errs, cmds, rcmds, recs)
	}
	rp := s.c.Pipeline()
	rcmds = make([]*redis.StatusCmd, len(blocks))
	for i, b := range blocks {
		if !write[i] {
			continue
		}
		for _, c := range cmds[i] {
			if err := c.Err(); err != nil {
				errs[i] = unavailable(err)
				break
			}
		}
		if errs[i] == nil {
			rcmds[i] = rp.Set(ctx, s.recordKey(b.Key), recs[i], s.cfg.TTL)
		}
	}
	if rp.Len() > 0 {
		_, _ = rp.Exec(ctx)
	}
	for i, c := range rcmds {
		if c != nil && c.Err() != nil {
			errs[i] = unavailable(c.Err())
		}
	}
	return errs
}

// checkPut reports a one-round-trip Put's outcome per block and deletes the
// records this Put set for blocks whose chunks did not all land, where
// they are still this Put's (best effort: a record left behind is a
// Corrupt miss for its first reader, which deletes it). Chunks are left to
// expire: they may be a peer's.
func (s *Store) checkPut(ctx context.Context, blocks []Block, errs []error, cmds [][]*redis.StatusCmd, rcmds []*redis.StatusCmd, recs [][]byte) []error {
	var bad []judged
	for i, b := range blocks {
		if rcmds[i] == nil {
			continue
		}
		for _, c := range cmds[i] {
			if err := c.Err(); err != nil {
				errs[i] = unavailable(err)
				if rcmds[i].Err() == nil {
					bad = append(bad, judged{b.Key, recs[i]})
				}
				break
			}
		}
		if errs[i] == nil && rcmds[i].Err() != nil {
			errs[i] = unavailable(rcmds[i].Err())
		}
	}
	if len(bad) > 0 && ctx.Err() == nil {
		s.deleteIfUnchanged(ctx, bad)
	}
	return errs
}

// judged is a commit record a caller found bad, as it read (or wrote) it.
type judged struct {
	key Key
	rec []byte
}

// deleteIfUnchanged deletes each record whose value is still the one
// judged bad, in one pipelined round trip (a script per record: compare
// and delete on the server). A record rewritten meanwhile (a peer stored
// the block again) stays. Best effort: a failure leaves the same miss for
// the next reader.
func (s *Store) deleteIfUnchanged(ctx context.Context, bad []judged) {
	pipe := s.c.Pipeline()
	for _, b := range bad {
		pipe.Eval(ctx, deleteIfScript, []string{s.recordKey(b.key)}, b.rec)
	}
	_, _ = pipe.Exec(ctx)
}

// deleteIfScript deletes KEYS[1] if its value is ARGV[1].
const deleteIfScript = `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`

// Lookup returns how many leading keys of a chain have a commit record, in
// one pipelined round trip. A record found here may still fail
// verification in Get.
func (s *Store) Lookup(ctx context.Context, keys []Key) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	pipe := s.c.Pipeline()
	cmds := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Exists(ctx, s.recordKey(k))
	}
	_, _ = pipe.Exec(ctx)
	for i, c := range cmds {
		n, err := c.Result()
		if err != nil {
			return i, unavailable(err)
		}
		if n == 0 {
			return i, nil
		}
	}
	return len(keys), nil
}

// Outcome is what Get found for one block.
type Outcome int

const (
	Hit     Outcome = iota + 1 // verified and copied into Dst
	Missing                    // no commit record (never stored, expired, evicted or deleted), or a chunk of it evicted or expired
	Corrupt                    // a record or chunk failed verification (counted, cleaned up)
	Failed                     // the server failed or the context ended
)

func (o Outcome) String() string {
	switch o {
	case Hit:
		return "hit"
	case Missing:
		return "missing"
	case Corrupt:
		return "corrupt"
	case Failed:
		return "failed"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// GetItem asks for one block into Dst (PayloadBytes long).
type GetItem struct {
	Key
	Hash uint64
	Dst  []byte
}

// Get reads blocks in one pipelined round trip (each block's commit record
// and its chunks: their count is fixed by PayloadBytes and ChunkBytes) and
// copies each payload that verifies against its record into its Dst. Dst is
// written only for a Hit; other bytes of a missed block may have been
// written and must not be used. Corrupt blocks, and blocks a chunk of
// which Redis evicted or expired under the record (Missing), are deleted,
// if their record is still the one read (a peer may have stored the block again since: a
// torn read of a rewrite is no reason to delete it), so the next lookup
// misses at once. An item whose Dst is not PayloadBytes long or whose
// digest is zero is Failed, and one whose record names another Hash under
// its key (the caller's hash and digest disagree) Missing: neither touches
// what is stored.
func (s *Store) Get(ctx context.Context, items []GetItem) []Outcome {
	out := make([]Outcome, len(items))
	if len(items) == 0 {
		return out
	}
	pipe := s.c.Pipeline()
	rcmds := make([]*redis.StringCmd, len(items))
	ccmds := make([][]*redis.StringCmd, len(items))
	for i, it := range items {
		if len(it.Dst) != s.cfg.PayloadBytes || it.Digest == ([32]byte{}) {
			out[i] = Failed // not a block this Store stores (see ErrBadBlock)
			continue
		}
		rcmds[i] = pipe.Get(ctx, s.recordKey(it.Key))
		for c := range s.chunks {
			ccmds[i] = append(ccmds[i], pipe.Get(ctx, s.chunkKey(it.Key, c)))
		}
	}
	if pipe.Len() == 0 {
		return out
	}
	_, _ = pipe.Exec(ctx)
	recs := make([]record, len(items))
	raw := make([][]byte, len(items))
	var damaged []Key // not a value this format writes
	var bad []judged
	for i, it := range items {
		if out[i] != 0 {
			continue
		}
		b, err := rcmds[i].Bytes()
		switch {
		case errors.Is(err, redis.Nil):
			out[i] = Missing
			continue
		case wrongType(err):
			out[i] = Corrupt // not a value this format writes: damage
			damaged = append(damaged, it.Key)
			continue
		case err != nil:
			out[i] = Failed
			continue
		}
		r, err := decodeRecord(b)
		if err == nil && (r.Fingerprint != s.cfg.Fingerprint || r.Namespace != it.Namespace || r.Digest != it.Digest ||
			r.PayloadLen != uint64(s.cfg.PayloadBytes) || len(r.Sums) != s.chunks) {
			err = fmt.Errorf("%w: record names another block", ErrCorrupt)
		}
		if err != nil {
			out[i] = Corrupt
			bad = append(bad, judged{it.Key, b})
			continue
		}
		if r.Hash != it.Hash {
			out[i] = Missing // the key's block, but not the one the caller's hash names
			continue
		}
		recs[i], raw[i] = r, b
	}
	for i, it := range items {
		if out[i] != 0 {
			continue
		}
		out[i] = Hit
		cb := int(recs[i].ChunkBytes)
		for c, cmd := range ccmds[i] {
			b, err := cmd.Result() // a string: copied once, into Dst
			want := it.Dst[c*cb : min((c+1)*cb, len(it.Dst))]
			switch {
			case errors.Is(err, redis.Nil):
				out[i] = Missing // a chunk evicted or expired under its record: gone, not damaged
			case wrongType(err) || (err == nil && (len(b) != len(want) || xxhash.Sum64String(b) != recs[i].Sums[c])):
				out[i] = Corrupt // a chunk overwritten under its record
			case err != nil:
				out[i] = Failed
			default:
				copy(want, b)
				continue
			}
			break
		}
		if out[i] == Corrupt || out[i] == Missing {
			bad = append(bad, judged{it.Key, raw[i]}) // the record serves no one now
		}
	}
	if ctx.Err() == nil {
		if len(damaged) > 0 {
			_, _ = s.Delete(ctx, damaged) // best effort: a failure leaves the same miss for the next reader
		}
		if len(bad) > 0 {
			s.deleteIfUnchanged(ctx, bad)
		}
	}
	return out
}

// wrongType reports a server's WRONGTYPE error: the key holds a value of
// another kind (a list, a hash...), which no Store writes.
func wrongType(err error) bool { return err != nil && redis.HasErrorPrefix(err, "WRONGTYPE") }

// Delete removes blocks (their records first, then their chunks) in one
// pipelined round trip and returns how many records existed.
func (s *Store) Delete(ctx context.Context, keys []Key) (int, error) {
	if len(keys) == 0 {
		return 0, nil
	}
	pipe := s.c.Pipeline()
	cmds := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.Del(ctx, s.recordKey(k))
		for c := range s.chunks {
			pipe.Del(ctx, s.chunkKey(k, c))
		}
	}
	_, _ = pipe.Exec(ctx)
	n := 0
	for _, c := range cmds {
		d, err := c.Result()
		if err != nil {
			return n, unavailable(err)
		}
		n += int(d)
	}
	return n, nil
}

func unavailable(err error) error {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// LookupChains is Lookup for several chains in one pipelined round trip:
// Found[i] is how many leading keys of chains[i] have a commit record.
func (s *Store) LookupChains(ctx context.Context, chains [][]Key) ([]int, error) {
	found := make([]int, len(chains))
	pipe := s.c.Pipeline()
	cmds := make([][]*redis.IntCmd, len(chains))
	for i, ks := range chains {
		for _, k := range ks {
			cmds[i] = append(cmds[i], pipe.Exists(ctx, s.recordKey(k)))
		}
	}
	if pipe.Len() == 0 {
		return found, nil
	}
	_, _ = pipe.Exec(ctx)
	var first error
	for i, cs := range cmds {
		for _, c := range cs {
			n, err := c.Result()
			if err != nil && first == nil {
				first = unavailable(err)
			}
			if err != nil || n == 0 {
				break
			}
			found[i]++
		}
	}
	return found, first
}

// AddHook instruments the Store's client (counting round trips, tracing):
// see redis.Hook. Add hooks before the Store is shared.
func (s *Store) AddHook(h redis.Hook) { s.c.AddHook(h) }
