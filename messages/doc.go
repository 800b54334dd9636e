// Package messages holds every message kvtier's actors exchange: requests from the
// Manager to the tier actors, and the tier actors' requests and replies to each
// other.
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
//	Manager -> GPU actor:     AllocateBatch, AppendBatch, FreeBatch, Query, Flush, Stats
//	GPU -> index -> GPU:      Lookup / LookupResult (which lower tier holds a chain)
//	GPU -> pinned -> GPU:     OffloadRequest / OffloadGrant, then OffloadDone
//	                          FetchRequest / FetchGrant, then FetchRelease
//	pinned, disk -> index:    IndexUpdate
package messages
