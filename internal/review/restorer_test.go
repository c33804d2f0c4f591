package review

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/internal/ledger"
	"github.com/shaperproxy/shaperproxy/proxy"
)

// newTestRestorer is a Restorer on a real ledger file.
func newTestRestorer(t *testing.T) (*Restorer, *ledger.Store) {
	t.Helper()
	st, err := ledger.Open(filepath.Join(t.TempDir(), "state.db"), ledger.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := NewRestorer(st)
	t.Cleanup(func() { _ = r.Close(); _ = st.Close() })
	return r, st
}

// longTurns is a history of n assistant turns whose texts are each long
// enough to be searched, with a user message between them.
func longTurns(n int) []string {
	var msgs []string
	for i := range n {
		msgs = append(msgs, msg("role", "user", "content", fmt.Sprintf("step %d?", i)),
			msg("role", "assistant", "content", strings.Repeat(fmt.Sprintf("Turn %d: read the body, then the header.\n\n", i), 8)))
	}
	return msgs
}

// TestRestorerSearchesOnce: a conversation's request re-sends its
// history; each assistant text is searched for a merged turn once, not on
// every request, and a new turn is searched when it comes.
func TestRestorerSearchesOnce(t *testing.T) {
	r, _ := newTestRestorer(t)
	send := func(msgs []string) {
		t.Helper()
		body := requestBody(msgs)
		out, err := r.TransformRequest(t.Context(), &proxy.Call{Conversation: "c:1", View: mustParse(t, body)}, body)
		if err != nil || !bytes.Equal(out, body) {
			t.Fatalf("nothing to restore: err %v, changed %v", err, !bytes.Equal(out, body))
		}
	}
	send(longTurns(5))
	if n := r.scanned.Len(); n != 5 {
		t.Fatalf("first request: %d texts remembered, want 5", n)
	}
	send(longTurns(5))
	if n := r.scanned.Len(); n != 5 {
		t.Fatalf("the same history again: %d texts remembered, want still 5", n)
	}
	send(longTurns(6))
	if n := r.scanned.Len(); n != 6 {
		t.Fatalf("one turn more: %d texts remembered, want 6", n)
	}
}

// TestRestorerFindsLaterInsertion: a merged message met before its
// insertion was recorded is not remembered as clean: once the insertion
// is in the ledger, the next request restores it.
func TestRestorerFindsLaterInsertion(t *testing.T) {
	r, st := newTestRestorer(t)
	ins := NewInsertion(testDraft(), noticeMessage(testPacket()), contDraft)
	merged := msg("content", MergedContent(testDraft().Content, contDraft.Content), "role", "assistant")
	body := requestBody(append(longTurns(2), merged, msg("role", "user", "content", "next?")))
	call := func() int {
		t.Helper()
		out, err := r.TransformRequest(t.Context(), &proxy.Call{Conversation: "c:2", View: mustParse(t, body)}, body)
		if err != nil {
			t.Fatal(err)
		}
		return len(mustParse(t, out).Messages)
	}
	n := len(mustParse(t, body).Messages)
	if got := call(); got != n {
		t.Fatalf("restored before the insertion was recorded: %d messages, want %d", got, n)
	}
	if err := st.PutInsertion("c:2", ledger.Insertion(ins)); err != nil {
		t.Fatal(err)
	}
	if got := call(); got != n+2 {
		t.Fatalf("after the insertion: %d messages, want %d (draft, notice, continuation)", got, n+2)
	}
}
