// Package actors holds kvtier's tier actors (protoactor-go): the GPU pool actor,
// the pinned pool actor, the disk tier actor and the prefix index actor. Each
// owns its state outright — a blockpool.Pool and device arena, a pinned.Pool, a
// disk.Store, an index map — and the actors talk only through the messages of
// package messages, so allocation, eviction and copies proceed across goroutines
// with no shared lock.
//
// # Shape
//
// An actor is a struct with Receive and a type switch; it decodes a message, calls
// its plain type (the pools, the store and the policies are tested without
// actors), and replies. The GPU and pinned actors are the thinnest: their
// tiers' logic is the state machines of packages gpu/tier and pinned
// (pinned.Tier), and the actors only turn messages into events and carry out
// the Ready each event leaves (copies, sends, timers, replies); the disk actor
// does the same over disk.Store's Plan/Complete ops. Copies run on the device's stream workers and disk I/O on
// the disk actor's workers; a completion comes back as a message, so no actor
// blocks on I/O or on a future. Mailboxes are protoactor's default unbounded
// queues: nothing is dropped; the Manager bounds the calls in flight
// (Config.MaxPendingCalls), so memory stays bounded under any flood.
//
// Dispatch. The pinned, disk, remote, index and event actors each run on a
// goroutine of their own (Dedicated). The Manager runs the GPU actor on
// protoactor's synchronized dispatcher instead: whoever sends it a message
// while its mailbox is idle processes the mailbox on its own goroutine, one
// message at a time as ever (the mailbox's atomic status admits one runner),
// so a call needs no goroutine hand-off and the prompt's tokens, hashed by
// the caller, are read on the core that hashed them. Nothing the GPU actor
// does blocks (copies, timers and lower tiers answer by message), which is
// what makes running it on a sender's goroutine safe; the disk actor, whose
// stop waits for its I/O workers, must never run on one of them.
//
// # Files
//
//	gpu_actor.go      the GPU actor: messages to gpu/tier events, Ready executed
//	pinned_actor.go   the pinned actor: messages to pinned.Tier events, Ready executed
//	disk_*.go         the disk actor and its I/O workers
//	remote_actor.go   the shared Redis tier, speaking the disk protocol
//	lower_actor.go    the fan-out below pinned memory to disk and remote
//	index_actor.go    hash -> tiers below the GPU, longest-prefix lookups,
//	                  BelowGone to the tiers above when a copy leaves
//
// # Tier boundary
//
// The GPU actor sees lower tiers only through two conversations with the pinned
// actor: OffloadRequest/OffloadGrant/OffloadDone to write blocks down and
// FetchRequest/FetchGrant/FetchRelease to read them up. The index actor answers
// which lower tier holds a chain. The disk actor sits below the pinned actor with
// the same shape — DiskWrite/DiskWriteDone and DiskRead/DiskReadDone — so the GPU
// actor does not know whether a block comes from pinned memory or from disk.
//
// # Invariants
//
// Built with the invariants tag, the GPU and pinned actors walk their whole
// state after every message and panic on the first inconsistency.
package actors
