// Package actors holds kvtier's tier actors: the GPU pool actor, the pinned pool
// actor and the prefix index actor (protoactor-go). Each owns its state outright —
// a blockpool.Pool and device arena, a pinned.Pool, an index map — and the actors
// talk only through the messages of package messages, so allocation, eviction and
// copies proceed across goroutines with no shared lock.
//
// # Shape
//
// An actor is a struct with Receive and a type switch; it decodes a message, calls
// its plain type (the pools and policies are tested without actors), and replies.
// Copies run on the device's stream workers; a small goroutine per batch waits for
// the batch's event and reports back with a message, so no actor blocks on I/O or
// on a future. Mailboxes are protoactor's default unbounded queues: nothing is
// dropped.
//
// # Tier boundary
//
// The GPU actor sees lower tiers only through two conversations with the pinned
// actor: OffloadRequest/OffloadGrant/OffloadDone to write blocks down and
// FetchRequest/FetchGrant/FetchRelease to read them up. The index actor answers
// which lower tier holds a chain. A disk tier plugs in below the pinned actor with
// the same shape (the pinned actor drains its victims to it and fetches from it),
// leaving the GPU actor unchanged.
package actors
