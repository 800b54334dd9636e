// Package disk is kvtier's disk tier: a crash-consistent, self-verifying
// block store that survives restarts.
//
// # Layout
//
// A Store owns one directory (0700) and holds an flock on the directory
// itself, so one Store per directory even if someone deletes the LOCK file
// it also locks for older versions. The directory holds Config.Files
// preallocated slot files (0600). OSFS opens every name with O_NOFOLLOW and
// refuses links and files it does not own (ErrUnsafeFile); see OSFS. Every slot is
// one 4 KiB header block followed by Config.PayloadBytes rounded up to
// 4 KiB. The header is self-describing: magic, format and hash-scheme
// versions, the model/layout fingerprint, the tenant namespace, the block
// and parent hashes, token count, the caller's 32-byte prefix digest,
// payload length, an xxh64 payload checksum, a per-store generation number
// and a checksum over all of it. Open rebuilds the index from the headers
// alone; payloads are verified when read.
//
// After the record, the header block may hold its chain extension
// (Meta.Chain: whether the block has a parent, its token ids, its LoRA
// adapter), with a checksum of its own, so that a store reopened after a
// restart announces its blocks as the GPU did (KV events). Records
// written before the extension open with no Chain; one whose extension
// does not verify opens the same way, counted in OpenReport.BadChains,
// and is served as ever: the extension is never used to serve a block.
//
// # Verification
//
// A 64-bit block hash may be shared by two prefixes, so a reader names the
// digest it expects (Meta.Digest; callers compute a SHA-256 chain over the
// namespace and every token). PlanRead refuses a block indexed with
// another digest before any I/O (ErrDigestMismatch: a miss, the block
// stays), and every read checks the header it reads back, digest,
// namespace, hash, parent and tokens included, against the index, and the
// payload against its checksum; a mismatch there is a corrupt record,
// dropped. Stats.VerifyMismatch counts digest refusals of both kinds.
//
// # Crash consistency
//
// A payload under 2 MiB goes with its header in one pwritev (the header
// carries the payload's checksum, summed first); a bigger one, with
// Config.Sync, or on a File without WritevAt, goes first and its header
// second (the checksum summed while the payload is written), with
// Config.Sync each followed by fdatasync. A write torn by a crash leaves
// either no valid header or a header whose payload checksum does not match
// what landed (the slot's previous header over a new payload included),
// which the first read detects: the block is then dropped, never served. A slot is unpublished before it is
// overwritten, and read pins keep a slot from being reused while a read is
// in flight. Config.Sync extends the guarantee from process crashes to power
// loss. Files use
// O_DIRECT where the file system supports it (probed at Open) and the page
// cache otherwise; Store.Mode says which.
//
// # Plan, execute, complete
//
// A Store is a plain single-threaded state machine that never blocks: its
// owner (an actor) calls PlanWrite, PlanRead or PlanRemove, hands the
// returned op to a worker goroutine that calls Execute (the only place I/O
// happens), and reports the result back with CompleteWrite, CompleteRead
// or CompleteRemove. Concurrent reads of one hash share a single ReadOp. A
// removal unpublishes the block at plan time and holds its slot until
// RemoveOp.Execute has zeroed the header (and fdatasync'd it with
// Config.Sync), so a removal the caller was told about survives a crash.
// WriteSync, ReadSync and RemoveSync do all three steps on the calling
// goroutine:
//
//	st, rep, err := disk.Open(disk.Config{
//		Dir:           dir,
//		CapacityBytes: 64 << 30,
//		PayloadBytes:  2 << 20,
//		Fingerprint:   modelFingerprint,
//		Policy:        policy.S3FIFO,
//	})
//	if err != nil {
//		return err // errors.Is(err, disk.ErrLocked) if another store has dir
//	}
//	defer st.Close()
//	log.Printf("%d blocks on disk, %d dropped", rep.Records, rep.DroppedTotal())
//
//	op, err := st.PlanWrite(disk.Meta{Hash: h, Parent: p, Tokens: 16})
//	if err != nil {
//		return err // ErrExists, ErrNoSpace
//	}
//	if victim, ok := op.Victim(); ok {
//		forget(victim.Hash) // evicted to make room
//	}
//	st.CompleteWrite(op, op.Execute(payload)) // Execute on a worker
//
// # Errors
//
// Failed writes leave the block unpublished and the slot free; failed or
// corrupt reads are misses and remove the block. Both are counted in
// Stats by kind (EIO, ENOSPC, short, corrupt) and the store keeps working.
// FaultFS injects such failures in tests.
package disk
