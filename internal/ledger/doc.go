// Package ledger is the proxy's small durable state per conversation, in
// one bbolt file (FileName, "state.db", in the data directory, mode 0600):
//
//   - insertions: what the masked review put into a turn's history (the
//     draft, the notice, the continuation), keyed by the sha256 of the
//     merged content the client saw, so later requests can be restored
//     (review.Restore takes a lookup func built on Insertion);
//   - checkpoints: the turns already reviewed (MarkReviewed), so a turn is
//     reviewed at most once, across restarts;
//   - small named values (Put, Get, Delete) for other features' state;
//   - each conversation's last-seen time: Purge removes conversations idle
//     for longer than the TTL (default 7 days); ClearConversation removes
//     one at once.
//
// ledger and review do not import each other: ledger.Insertion and
// review.Insertion have the same fields and convert into each other.
//
//	st, err := ledger.Open(filepath.Join(dataDir, ledger.FileName), ledger.Options{})
//	if err != nil { ... }
//	defer st.Close()
//
//	if first, err := st.MarkReviewed(conv, review.TurnKey(req, conv)); err == nil && first {
//		// review this turn
//	}
//	st.PutInsertion(conv, ledger.Insertion(review.NewInsertion(draft, notice, cont)))
//	body, n, err := review.Restore(req, func(k [32]byte) (review.Insertion, bool) {
//		ins, ok, err := st.Insertion(conv, k)
//		return review.Insertion(ins), ok && err == nil
//	})
//
// Every write commits and fsyncs before it returns (a few milliseconds):
// call writes where a request can afford it (MarkReviewed before a review
// that takes seconds anyway) or from a goroutine. The one exception is
// PutLater, for state that changes on the request path (the guard's): it
// returns at once, the value is read back from memory, and a background
// writer commits the values queued meanwhile in one transaction, within
// milliseconds; Close (and Flush) write what is queued, and a crash loses
// only the values of its last moments. The queue holds at most 65,536
// values and 64 MiB (and the batch being written as much again): past
// either bound a value is lost and counted in Stats, as a write error's
// are, and a value refused in place of one still queued drops that one
// too (the key reads the file's value, as after a restart) — a disk that
// stalls costs state, not unbounded memory. A value not yet on disk is
// served from the queue; the others, up to 64 KiB, from a bounded cache after
// their first read (larger ones from the file). A Store is safe for concurrent
// use; one process at a time may open the file.
package ledger
