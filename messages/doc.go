// Package messages holds every message kvtier's actors exchange: requests from the
// Manager to the tier actors, and the tier actors' requests and replies to each
// other.
//
// # What an embedder uses
//
// A program that embeds kvtier names these types through the root package's
// aliases (kvtier.AllocRequest, ...), and this package documents their fields:
// AllocRequest, AllocResult, OnboardOutcome and Completion (AllocResult.Ready),
// AppendItem, CommitItem, Tier with its constants and TierTokens, TierStats and
// EventStats, Ingestion with its constants, ErrStopped (kvtier.ErrClosed),
// ErrCanceled and ErrFailed. Every other type is the actors' own protocol:
// exported because the actors live in several packages, not for callers, and
// it changes with them.
//
// # Rules
//
// Every message is a pointer to a struct and is read-only once sent. Slices in a
// message belong to the receiver from then on. Replies carry copies or ownership
// (a slot reference the receiver must give back), never a pointer into an actor's
// state. Requests from the Manager carry a Reply channel with room for one answer,
// so an actor never blocks on a reply; every result has an Err field.
//
// # Flows
//
//	Manager -> GPU actor:     AllocateBatch, AppendBatch, CommitBatch, FreeBatch, StepBatch,
//	                          Withdraw, Query, Flush, StatsRequest, ResidencyQuery, EventsSync
//	GPU -> index -> GPU:      Lookup / LookupResult (which lower tier holds a chain)
//	GPU -> pinned -> GPU:     OffloadRequest / OffloadGrant, then OffloadDone
//	                          FetchRequest / FetchGrant, then FetchRelease
//	pinned, disk -> index:    IndexUpdate
package messages
