// Package events publishes kvtier's KV events in vLLM's wire format, so
// KV-aware routers (llm-d's KV-cache indexer, Dynamo's router, anything
// that reads vLLM's stream) see which blocks each tier of a replica holds.
//
// Wire format (vllm/distributed/kv_events.py): a ZMQ PUB socket sends
// messages of three frames, [topic, 8-byte big-endian sequence number,
// msgpack payload]. The payload is a batch, the array [ts, events,
// dp_rank]; each event is, in FormatMap (vLLM >= 0.24), a map whose "type"
// is the tag:
//
//	{"type": "BlockStored", "block_hashes": [...], "parent_block_hash": h|nil,
//	 "token_ids": [...], "block_size": n, "lora_id": nil, "medium": m, "lora_name": s|nil}
//	{"type": "BlockRemoved", "block_hashes": [...], "medium": m}
//	{"type": "AllBlocksCleared"}
//
// and in FormatArray (older vLLM) the same fields as an array after the
// tag. DecodeBatch also reads the batch as the map newer vLLM writes
// ({"ts": ts, "events": [...], "data_parallel_rank": dp_rank}, its
// EventBatch no longer array_like); the encoder keeps the array, which
// every consumer of the older form decodes. Block hashes are kvtier's
// chained 64-bit prefix hashes, written as msgpack uint64 (0xcf); the
// decoder takes a hash in any int form or as bytes, as vLLM sends it
// (ExternalBlockHash is bytes | int). Mediums:
// GPU, CPU (pinned host memory), STORAGE (the local disk, as vLLM's
// file-system tier names itself) and REMOTE (the shared Redis tier). A
// block computed under a LoRA adapter names it (lora_name) on every
// medium; lora_id stays nil.
//
// vLLM's events for hybrid models (several KV cache groups: full
// attention, sliding window) also carry group_idx, and a BlockStored its
// group's kv_cache_spec_kind and kv_cache_spec_sliding_window (left out at
// their defaults, extra_keys skipped): they decode into Event.Group,
// SpecKind and SlidingWindow, and a View keeps each group's hashes apart,
// so that a sliding-window group dropping old blocks does not hide the
// full-attention group's copies. kvtier's own tiers have one group (0).
//
// What is published: every change of what a tier serves hits from. A
// block becomes GPU-resident when the engine commits it (never before its
// KV is computed), and lower-tier resident when its copy there is verified
// and indexed. A block moving down is stored on the lower medium before it
// is removed from the upper one. Should an actor on the way of the tiers'
// changes (the pinned tier's, the prefix index's) stop for good, the
// tiers below the GPU serve no more: the stream says they hold nothing,
// and the GPU's changes go around the stopped actor, starting with its
// whole residency (a Full messages.Residency). A publisher starts (and
// stops) with AllBlocksCleared; a disk reopened after a restart then
// announces its records as the GPU announced the blocks: each with its
// parent block hash (none for a chain's first block), its token ids and its
// adapter name, a parent the disk holds before its children. The chain goes
// down with each copy (messages.OffloadItem.Chain, LowerWriteItem) and the
// disk keeps it in its record header (disk.Meta.Chain). A record announces
// none of the three, as a root with no token ids, where its chain was not
// known or did not fit when written (the GPU had reused the block's parent
// first; a block read up from the shared tier and written to the disk; token
// ids past the header's room, about 986 per block), where it was written by
// a kvtier that did not record chains, or where its chain's checksum fails
// (disk.OpenReport.BadChains; the block itself is verified and served as
// ever). The remote tier is
// shared and evicts on its own: its stores and removals are what this
// node wrote and found gone.
//
// A run numbers its batches one by one from Config.FirstSeq. vLLM numbers
// from 0, so a subscriber cannot tell a restarted publisher's batches from
// the old run's it has seen; a process that starts each run above every
// earlier run's numbers (FirstSeq from the wall clock in nanoseconds) makes
// every restart a gap that View reports (ErrGap) and a snapshot repairs.
// View also catches a restart numbered from below by its timestamps: a
// batch numbered at or before the last applied but stamped later.
//
// Replay (vLLM's protocol) on a ROUTER socket: a client sends an 8-byte
// big-endian starting sequence number and receives [seq, payload] for each
// buffered batch from there, then [-1, ""]. Beyond vLLM, a client that
// sends SnapshotRequest instead receives one batch numbered as the last
// published — AllBlocksCleared, then every block each medium holds, a
// block after its parent where the medium holds both — then
// the end marker: a router that lost batches applies it (View.Reset) and
// the batches numbered after it, and holds exactly the tiers' residency.
// A request the server cannot answer (its Source failed or timed out, or
// the request is neither) gets no batches and the failure marker
// [-1, "kvtier-replay-failed <code>: <detail>"] in place of the end
// marker; Replay and FetchSnapshot return it as a *ReplayError, which
// matches ErrNoReplay.
//
// Publisher is the plain state machine (numbered batches, the bounded
// replay buffer, the residency they add up to); actors.EventsActor owns
// one; Server does the socket I/O off the actor, dropping a batch (counted,
// a gap subscribers see) rather than ever stalling a tier. Each subscriber
// has its own queue and writer, and each replay client its own goroutine,
// so one that reads slowly or not at all delays no other (the PUB and
// ROUTER ends are written over zmq4's ZMTP connections, not zmq4's
// sockets: see pub.go). Subscribe, SubscribeListen,
// Replay, FetchSnapshot and View are the consumer side, for Go routers and
// the tests; they too are written over zmq4's ZMTP connections, so that a
// message a broken or hostile peer declares past the client's bound
// (DefaultMaxMessage, 1 GiB, or WithMaxMessage's) fails with
// ErrMessageTooBig before zmq4 allocates it (see client.go).
//
// An endpoint that cannot work at all (not tcp:// or ipc://, a bad port)
// is refused with ErrBadEndpoint, by Listen and the clients alike, and so
// is an unknown host where one is bound (SubscribeListen); Subscribe and
// the replay clients retry an unknown host, as DNS may name it later. A
// ServerConfig, ClientOption or format name refused is ErrBadConfig. A
// busy port is neither: the error wraps the system's.
package events
