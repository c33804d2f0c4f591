package reqshape

import (
	"fmt"
	"testing"
)

// TestTrackerBounded: the tracker's memory is bounded in bytes as well as
// in conversations (a request's prints take 8 bytes a message), the
// oldest conversations going first and never the one just recorded, its
// count matches what it holds, and one conversation's set of blocks
// shaped at breaks stops growing at maxBatched.
func TestTrackerBounded(t *testing.T) {
	defer func(n int) { trackedBytes = n }(trackedBytes)
	trackedBytes = 4 << 20
	h := newTracker(nil, historyConversations)
	big := prints{msgs: make([]uint64, 1<<16)} // 512 KiB
	for i := range 20 {
		h.state(fmt.Sprint("c", i))
		h.record(fmt.Sprint("c", i), nil, big, nil)
	}
	counted, sum, n := trackerCount(h)
	if counted != sum || counted > trackedBytes || n != trackedBytes/(8<<16) {
		t.Fatalf("%d conversations, %d bytes counted, %d held; want %d within %d", n, counted, sum, trackedBytes/(8<<16), trackedBytes)
	}
	if p, _ := h.state("c19"); len(p.msgs) != 1<<16 {
		t.Fatal("the last conversation recorded was forgotten")
	}
	h.record("c19", nil, prints{msgs: make([]uint64, 10)}, nil) // its next request, shorter
	if got, held, n := trackerCount(h); got != held || n != 8 {
		t.Errorf("after a shorter request: %d bytes counted, %d held, %d conversations (want 8)", got, held, n)
	}
	if p, _ := h.state("c0"); len(p.msgs) != 0 {
		t.Fatal("the oldest conversation was kept")
	}

	// One conversation's set.
	keys := make([]blockKey, maxBatched+10)
	for i := range keys {
		keys[i] = keyOf(fmt.Sprint("block ", i))
	}
	h.state("sets")
	h.record("sets", nil, prints{}, keys[:maxBatched-5])
	h.record("sets", nil, prints{}, keys[maxBatched-5:])
	if _, b := h.state("sets"); len(b) != maxBatched {
		t.Fatalf("a set of %d blocks, want %d at most", len(b), maxBatched)
	}
}

// trackerCount returns the bytes h counts, the bytes its conversations
// hold, and how many it keeps.
func trackerCount(h *tracker) (counted, held, n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for el := h.order.Front(); el != nil; el = el.Next() {
		held += el.Value.(*convState).size()
	}
	return h.bytes, held, h.order.Len()
}

// TestTrackerRecordAfterEviction: a conversation pushed out of memory
// between its request's state and record keeps the set that request read
// (kv is written from it), not an empty one.
func TestTrackerRecordAfterEviction(t *testing.T) {
	h := newTracker(nil, 1)
	_, read := h.state("a")
	h.record("a", read, prints{}, []blockKey{keyOf("earlier break")})
	_, read = h.state("a") // the request reads the set ...
	h.state("b")           // ... another conversation pushes "a" out ...
	h.record("a", read, prints{}, []blockKey{keyOf("this break")})
	if _, b := h.state("a"); !b[keyOf("earlier break")] || !b[keyOf("this break")] {
		t.Fatalf("the set after the eviction: %d blocks, want both", len(b))
	}
}
