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
//	remote_actor.go   the shared Redis tier, speaking the lower-tier protocol
//	lower_actor.go    the fan-out below pinned memory to disk and remote
//	index_actor.go    hash -> tiers below the GPU, longest-prefix lookups,
//	                  BelowGone to the tiers above when a copy leaves
//
// # Tier boundary
//
// The GPU actor sees lower tiers only through two conversations with the pinned
// actor: OffloadRequest/OffloadGrant/OffloadDone to write blocks down and
// FetchRequest/FetchGrant/FetchRelease to read them up. The index actor answers
// which lower tier holds a chain. Every tier below the pinned actor (disk,
// remote, and the fan-out over both) speaks one protocol with it, in
// messages/lower.go: LowerWrite/LowerWriteDone and LowerRead/LowerReadDone
// through pinned slots, LowerQuery, Flush and StatsRequest. So the GPU actor
// does not know whether a block comes from pinned memory, disk or Redis, and
// the pinned actor does not know which tier it drains to.
//
// # Adding a tier below host memory
//
// The remote tier was added this way; a new one (say, an object store) takes
// the same steps:
//
//  1. A package with the tier's plain logic and its own tests, like remote/:
//     no actors, no goroutines of its own, every deadline from a context or
//     an injected clock. Every record it returns is verified against the
//     digest it was asked for (messages.LowerReadItem.Digest) and the
//     record's checksum; anything else is a miss.
//  2. A thin actor here that speaks the lower-tier protocol of
//     messages/lower.go: answer each LowerWrite with exactly one
//     LowerWriteDone that returns every slot, each LowerRead with exactly one
//     LowerReadDone (writing a slot's bytes only before it), and Flush and
//     StatsRequest. Its I/O runs on worker goroutines that report back by
//     message; the actor keeps the quota and the counters (remote_actor.go).
//  3. A messages.Tier value and its name (raising messages.NumTiers, which
//     sizes every TierTokens), a Config entry, and the Manager's wiring:
//     spawn the actor, give it to the pinned actor as its lower tier (alone,
//     or under the fan-out actor beside the disk), add it to the tiers New
//     lists with their actors (Flush, Stats, Exists, Lookup and Delete walk
//     that list; a tier that answers LowerQuery also gets a case in the
//     Manager's queryTier), and list it in Close.
//  4. How lookups find its blocks: a tier this node owns announces what it
//     holds with IndexUpdate (the disk) and takes its place in the index's
//     IndexConfig.Tiers, the order blocks are served from; a shared one
//     answers the index's RemoteLookup instead, since other nodes change it.
//     The index tracks hashes, not prefixes: every removal from a tier
//     after pinned memory is taken as a drop, and the GPU hears BelowGone
//     for the hash even while another tier keeps it listed (maybe for
//     another prefix's block), so it stops counting its copy held below.
//     A new tier after pinned memory gets that for free; one that becomes
//     a staging area above another (its removals moves, not drops) costs
//     the GPU rewrites until the index learns it. Pinned memory reports
//     the drains it drops as IndexUpdate.Dropped.
//
// Indexed by tier already, so a new tier adds an entry and no field:
// the token counts of AllocResult, QueryResult, Presence and LookupResult
// (messages.TierTokens, indexed by Tier.Index), the GPU tier's
// TokenCounts.Served, and Stats (Stats.Tiers, top first, and Stats.Tier).
//
// Still named per tier, and the next things to make generic: the Manager's
// actor fields (New gathers them into its list of tiers), the remote tier's
// own steps in Manager.Delete (it answers no query, so the Manager deletes
// from its store directly), the index actor's messages to the tiers (it
// tells the pinned actor when a block left the tiers below it, and the disk
// actor of its misses), and the fan-out actor, which takes exactly two
// lower tiers. The index serves a block from the first tier holding it in
// the order the Manager configures (IndexConfig.Tiers), not from code. The
// scheduler's AllocOutcome and Result keep a field per tier: the scheduler
// package does not import the library, and schedcache maps TierTokens into
// them.
//
// # Invariants
//
// Built with the invariants tag, the GPU and pinned actors walk their whole
// state after every message and panic on the first inconsistency.
package actors
