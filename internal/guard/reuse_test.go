package guard

import (
	"fmt"
	"strings"
	"testing"
	"unicode/utf8"
)

// kimiID is a Kimi-style call id: the tool name and the call's index in
// its step, the same in every step.
func kimiID(name string) string { return "functions." + name + ":0" }

// reusedLoop returns a history where the build fails n times in a row,
// each call in its own step with the same id.
func reusedLoop(n int) *hist {
	h := (&hist{}).system("You are an agent.").user("fix the build")
	id := kimiID("run_build")
	for range n {
		h.assistant("try again", tc{id, "run_build", `{"target":"./..."}`}).tool(id, "exit status 1")
	}
	return h
}

// TestReusedCallIDs: three failing calls with one reused id are an ECHO
// like three calls with distinct ids; the acknowledgement holds by
// position, so a fourth failure is not a new run and three more are.
func TestReusedCallIDs(t *testing.T) {
	g := mustGuard(t, nil)
	if n := g.Fold(reusedLoop(3).req(t)).Echo.Count(""); n != 3 {
		t.Fatalf("three failures with a reused id: count %d, want 3", n)
	}
	c := newConversation(t, g)
	var placed []int
	for n := 1; n <= 7; n++ {
		d, _, _ := c.send(reusedLoop(n))
		placed = append(placed, len(d.Placements))
	}
	// Requests with 1..7 failures: the notice comes at 3, stays (placed
	// again on the same message), and a second one joins it at 6.
	want := []int{0, 0, 1, 1, 1, 2, 2}
	if fmt.Sprint(placed) != fmt.Sprint(want) {
		t.Fatalf("placements per request %v, want %v", placed, want)
	}
	if st := c.load(); st.AckCallID != kimiID("run_build") || st.AckSeq != 5 {
		t.Errorf("ack %q at %d, want the sixth call (position 5)", st.AckCallID, st.AckSeq)
	}
}

// TestReusedIDRepeatedMessage: a call repeated with its id and arguments
// before any new result is the same call sent again, not a new failure;
// once a result names it, it is a call of its own.
func TestReusedIDRepeatedMessage(t *testing.T) {
	g := mustGuard(t, nil)
	id := kimiID("run_build")
	call := tc{id, "run_build", `{"target":"./..."}`}
	h := (&hist{}).user("go").
		assistant("", call).tool(id, failOut).
		assistant("", call).tool(id, failOut).
		assistant("", call)
	if n := g.Fold(h.req(t)).Echo.Count(""); n != 2 {
		t.Fatalf("repeat without a result: count %d, want 2", n)
	}
	h.tool(id, failOut)
	if n := g.Fold(h.req(t)).Echo.Count(""); n != 3 {
		t.Fatalf("after its result: count %d, want 3", n)
	}
}

// TestAckV1State: a state written before AckSeq existed (version 1)
// still reads, and its acknowledgement matches the id at any position.
func TestAckV1State(t *testing.T) {
	v1 := append([]byte{stateVersionV1}, appendLenString(nil, "call_2")...)
	v1 = append(v1, 0, 0, 0, 0, 0, 0) // flags, pending counts, step-down, notices
	var st state
	if err := st.UnmarshalBinary(v1); err != nil || st.AckCallID != "call_2" || st.AckSeq != -1 {
		t.Fatalf("v1 state: %+v, %v", st, err)
	}
	g := mustGuard(t, nil)
	e := g.Fold(failingLoop(5).req(t)).Echo
	if n := e.countAfter(st.AckCallID, st.AckSeq); n != 2 {
		t.Errorf("after a v1 ack of call_2: count %d, want 2", n)
	}
}

// TestLongCallIDs: ids and names of a megabyte (the client's to choose)
// are kept by the fold as a bounded key: results still find their calls,
// two ids that differ only at their end stay two calls, and neither the
// echo nor the acknowledgement holds more than the bound.
func TestLongCallIDs(t *testing.T) {
	long := strings.Repeat("é", 1<<19) // 1 MiB, multi-byte: the cut must not split a rune
	idA, idB := long+"A", long+"B"
	name := "run_build" + long
	if k := kept(idA); len(k) > maxKept || !utf8.ValidString(k) || k == kept(idB) || k != keyOf(idA) {
		t.Fatalf("kept: %d bytes, valid %v, A and B apart %v", len(k), utf8.ValidString(k), k != kept(idB))
	}
	if kept("call_1") != "call_1" || keyOf("call_1") != "call_1" {
		t.Fatal("a short id is not kept as it is")
	}
	g := mustGuard(t, nil)
	h := (&hist{}).user("fix the build")
	for _, id := range []string{idA, idB, idA} { // A again after its result: a call of its own
		h.assistant("", tc{id, name, `{"target":"./..."}`}).tool(id, "exit status 1")
	}
	e := g.Fold(h.req(t)).Echo
	if n := e.Count(""); n != 3 {
		t.Fatalf("three failing calls with long ids: count %d, want 3", n)
	}
	c := newConversation(t, g)
	c.send(h)
	if st := c.load(); len(st.AckCallID) > maxKept || st.AckCallID != kept(idA) {
		t.Fatalf("acknowledged id of %d bytes", len(st.AckCallID))
	}
}
