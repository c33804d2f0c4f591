package review

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shaperproxy/shaperproxy/conv"
	"github.com/shaperproxy/shaperproxy/internal/ledger"
	"github.com/shaperproxy/shaperproxy/internal/resolved"
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

// TestRestorerSkipsCleanHistory: the messages of the conversation's last
// request that held no merged turn, which the next request repeats (the
// proxy's Reparser says so), are not searched again — not even looked up
// in the cache of searched texts; a merged message among them is, every
// time, and is restored once its insertion is recorded. A body that
// repeats a key was not searched, so nothing of it counts as clean.
func TestRestorerSkipsCleanHistory(t *testing.T) {
	r, st := newTestRestorer(t)
	rp := conv.NewReparser(32 << 20)
	send := func(msgs []string) (*conv.Request, int) {
		t.Helper()
		body := requestBody(msgs)
		v, err := rp.Parse(body)
		if err != nil {
			t.Fatal(err)
		}
		out, err := r.TransformRequest(t.Context(), &proxy.Call{Conversation: "c:3", View: v}, body)
		if err != nil {
			t.Fatal(err)
		}
		return v, len(mustParse(t, out).Messages)
	}
	hist := longTurns(40)
	send(hist)
	hist = append(hist, longTurns(41)[80:]...)
	r.scanned = resolved.New[conv.RawKey, bool](maxScanned) // what the next request searches
	v, _ := send(hist)
	if n := r.scanned.Len(); n != 1 {
		t.Fatalf("a request repeating a clean history: %d texts searched, want only the new one", n)
	}
	if got := r.cleanFrom("c:3", v); got != 80 {
		t.Fatalf("clean from %d for the view itself, want 80: the record of the request it was read against, not its own", got)
	}

	ins := NewInsertion(testDraft(), noticeMessage(testPacket()), contDraft)
	merged := msg("content", MergedContent(testDraft().Content, contDraft.Content), "role", "assistant")
	hist = append(hist, merged, msg("role", "user", "content", "next?"))
	v, n := send(hist)
	if n != len(hist) {
		t.Fatalf("restored before the insertion was recorded: %d messages", n)
	}
	if err := st.PutInsertion("c:3", ledger.Insertion(ins)); err != nil {
		t.Fatal(err)
	}
	hist = append(hist, msg("role", "assistant", "content", strings.Repeat("Done: the test passes. ", 8)), msg("role", "user", "content", "and?"))
	next, err := rp.Parse(requestBody(hist))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.cleanFrom("c:3", next); got != 82 || !next.Repeats(v.ID(), 84) {
		t.Fatalf("clean from %d, want 82 (the merged message's index)", got)
	}
	r.scanned = resolved.New[conv.RawKey, bool](maxScanned)
	out, err := r.TransformRequest(t.Context(), &proxy.Call{Conversation: "c:3", View: next}, next.Body)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(mustParse(t, out).Messages); n != len(hist)+2 {
		t.Fatalf("after the insertion: %d messages, want %d (draft, notice, continuation)", n, len(hist)+2)
	}
	if n := r.scanned.Len(); n != 2 {
		t.Fatalf("the request read against the last: %d texts searched, want 2 (the merged one and the new one)", n)
	}

	dup := requestBody(append(hist, msg("role", "user", "role", "user", "content", "twice")))
	dv, err := rp.Parse(dup)
	if err != nil || !dv.DuplicateKeys {
		t.Fatalf("a body repeating a key: err %v", err)
	}
	if _, err := r.TransformRequest(t.Context(), &proxy.Call{Conversation: "c:3", View: dv}, dup); err == nil {
		t.Fatal("a body repeating a key restored without a word")
	}
	again, err := rp.Parse(requestBody(append(hist, msg("role", "user", "role", "user", "content", "twice"), msg("role", "user", "content", "x"))))
	if err != nil {
		t.Fatal(err)
	}
	if got := r.cleanFrom("c:3", again); got != 0 {
		t.Fatalf("after a body repeating a key, clean from %d, want 0", got)
	}
}

// TestSetCleanKeepsLatest: a request parsed before another of its
// conversation that ends after it does not replace the later one's record
// (the Reparser reads the next request against the later).
func TestSetCleanKeepsLatest(t *testing.T) {
	r, _ := newTestRestorer(t)
	rp := conv.NewReparser(32 << 20)
	parse := func(turns int) *conv.Request {
		t.Helper()
		v, err := rp.Parse(requestBody(longTurns(turns)))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	a, b := parse(40), parse(41)
	r.setClean("c:4", b, 82)
	r.setClean("c:4", a, 80) // a's request ends last
	if got := r.cleanFrom("c:4", parse(42)); got != 82 {
		t.Fatalf("clean from %d, want 82 (b's record: the next request is read against b)", got)
	}
}

// TestCleanFromTwoBack: two requests of one history parsed at once are
// both kept, and the Reparser reads each later request against the older
// of the two it keeps: the one two before it. The restorer still takes
// its record of that request and searches nothing again.
func TestCleanFromTwoBack(t *testing.T) {
	r, _ := newTestRestorer(t)
	rp := conv.NewReparser(32 << 20)
	body := requestBody(longTurns(200))
	if len(body) < 64<<10 {
		t.Fatalf("the body is %d bytes: too short for a parse settled later", len(body))
	}
	parse := func() (*conv.Request, func()) {
		t.Helper()
		v, settle, err := rp.ParseKeyedLater(bytes.Clone(body), conv.BodyKeys{})
		if err != nil || settle == nil {
			t.Fatalf("parse: %v (settle left: %v)", err, settle != nil)
		}
		return v, settle
	}
	send := func(v *conv.Request) {
		t.Helper()
		if _, err := r.TransformRequest(t.Context(), &proxy.Call{Conversation: "c:5", View: v}, v.Body); err != nil {
			t.Fatal(err)
		}
	}
	a, settleA := parse()
	b, settleB := parse() // at once: both are kept
	settleA()
	settleB()
	send(a)
	send(b)
	for i := range 3 {
		v, settle := parse()
		_, base, _ := v.Lineage()
		r.scanned = resolved.New[conv.RawKey, bool](maxScanned) // what this request searches
		send(v)
		if n := r.scanned.Len(); n != 0 {
			t.Fatalf("request %d, read against view %d (the first two: %d and %d): %d texts searched again, want none", i, base, a.ID(), b.ID(), n)
		}
		settle()
	}
}
