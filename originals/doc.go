// Package originals is the side table of original reasoning: when the proxy
// shapes an old reasoning block in an outgoing request, the original is kept
// here, keyed by sha256 of the shaped text, so a person can look it up.
//
// The table holds, per conversation, only the originals recorded in the
// conversation's current turn. Clearing is required, not an optimisation:
// without it the file grows with every conversation. BeginTurn clears a
// conversation's earlier turns and must be called whenever a new turn
// starts, even when shaping is disabled. Conversations idle past the TTL are
// purged by Maintain, which also compacts the file (bbolt never shrinks it).
//
// A serving process opens the table, writes through an async Writer so no
// request waits for a disk, and runs Maintain:
//
//	st, err := originals.Open(filepath.Join(dataDir, originals.FileName), originals.Options{})
//	if err != nil { ... }
//	defer st.Close()
//	go st.Maintain(ctx, 10*time.Minute)
//	w := st.Async(1024)
//	defer w.Close() // before st.Close
//
//	w.BeginTurn(conv, turn)              // when a request starts a new turn
//	w.Put([]originals.Entry{{Shaped: s, Original: o, Conversation: conv, Turn: turn}})
//
// The table is bounded (Options.MaxBytes, and a quarter of the free disk):
// when entries do not fit, the conversations idle longest make room, and
// what still does not fit is refused and counted; Options.Logger gets one
// warning per ReportEvery at most. It never takes the disk the capture log
// needs, and grows again by itself when space comes back.
//
// The forensic commands open the table with Options{ReadOnly: true}. bbolt
// lets one process write and, while it has the file open, no other process
// read: Open then fails with ErrLocked after LockTimeout.
package originals
