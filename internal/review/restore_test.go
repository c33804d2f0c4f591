package review

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

var contDraft = Draft{ReasoningField: "reasoning_content", Reasoning: "CONT-REASONING: vet failed, fix line 3.", Content: "Correction: go vet fails on calc.go:3."}

// lookupOf serves the given insertions and counts lookups.
func lookupOf(ins ...Insertion) (func([32]byte) (Insertion, bool), *int) {
	m := make(map[[32]byte]Insertion)
	for _, i := range ins {
		m[i.Key] = i
	}
	n := new(int)
	return func(k [32]byte) (Insertion, bool) {
		*n++
		i, ok := m[k]
		return i, ok
	}, n
}

// laterRequest is the next request of the conversation: the history, the
// merged assistant message as the client re-serialized it, a new user
// message.
func laterRequest(merged string) []byte {
	msgs := append(agentMessages(), merged, msg("role", "user", "content", "Thanks. What next?"))
	return requestBody(msgs)
}

func TestRestore(t *testing.T) {
	notice := noticeMessage(testPacket())
	ins := NewInsertion(testDraft(), notice, contDraft)
	mergedText := MergedContent(testDraft().Content, contDraft.Content)
	merged := msg("content", mergedText, "role", "assistant", "reasoning_content", draftReasoning+reasoningSeparator+contDraft.Reasoning)
	body := laterRequest(merged)
	req := mustParse(t, body)
	lookup, lookups := lookupOf(ins)
	out, n, err := Restore(req, lookup)
	if err != nil || n != 1 {
		t.Fatalf("restored %d, err %v", n, err)
	}
	if *lookups != 1 {
		t.Errorf("%d lookups, want 1 (only the message holding the separator)", *lookups)
	}
	got := mustParse(t, out)
	at := len(agentMessages())
	if len(got.Messages) != len(req.Messages)+2 {
		t.Fatalf("%d messages, want %d", len(got.Messages), len(req.Messages)+2)
	}
	d, no, c := got.Messages[at], got.Messages[at+1], got.Messages[at+2]
	if d.Role != "assistant" || d.Content != testDraft().Content || d.Reasoning != draftReasoning {
		t.Errorf("draft %+v", d)
	}
	if no.Role != "system" || raw(got, at+1) != string(notice) {
		t.Errorf("notice %s", raw(got, at+1))
	}
	if c.Role != "assistant" || c.Content != contDraft.Content || c.Reasoning != contDraft.Reasoning {
		t.Errorf("continuation %+v", c)
	}
	if got.Messages[at+3].Content != "Thanks. What next?" {
		t.Error("the next user message moved")
	}
	// Byte-identical elsewhere.
	m := req.Messages[at]
	if !bytes.HasPrefix(out, body[:m.Start]) || !bytes.HasSuffix(out, body[m.End:]) {
		t.Error("bytes outside the merged message changed")
	}
	// The continuation keeps the client's own serialization (key order).
	if !strings.HasPrefix(raw(got, at+2), `{"content":`) {
		t.Errorf("continuation not built from the client's message: %s", raw(got, at+2))
	}
	// Restoring again changes nothing: the merged content is gone.
	again, n2, err := Restore(got, lookup)
	if err != nil || n2 != 0 || !bytes.Equal(again, out) {
		t.Errorf("second restore: %d restored, err %v, same bytes %v", n2, err, bytes.Equal(again, out))
	}
	// The turns are what the model saw: the revision stayed in its turn.
	before, _ := req.OpenTurn()
	after, _ := got.OpenTurn()
	if before.Ordinal != after.Ordinal {
		t.Errorf("turn ordinal %d -> %d", before.Ordinal, after.Ordinal)
	}
}

func TestRestoreUnknownAndUnchanged(t *testing.T) {
	other := msg("role", "assistant", "content", "Not ours"+Separator+"at all")
	body := laterRequest(other)
	req := mustParse(t, body)
	lookup, lookups := lookupOf(NewInsertion(testDraft(), noticeMessage(testPacket()), contDraft))
	out, n, err := Restore(req, lookup)
	if err != nil || n != 0 || !bytes.Equal(out, body) {
		t.Errorf("unknown message: %d restored, err %v", n, err)
	}
	if *lookups != 1 {
		t.Errorf("%d lookups", *lookups)
	}
	// A request without the separator anywhere costs no lookup.
	plain := mustParse(t, requestBody(agentMessages()))
	lookup2, lookups2 := lookupOf()
	if out, n, _ := Restore(plain, lookup2); n != 0 || !bytes.Equal(out, plain.Body) || *lookups2 != 0 {
		t.Errorf("plain request: %d restored, %d lookups", n, *lookups2)
	}
}

// TestRestoreToolCalls: a continuation with tool calls; the client's
// message keeps its tool_calls and other keys, and the tool loop goes on.
func TestRestoreToolCalls(t *testing.T) {
	cont := Draft{ReasoningField: "reasoning_content", Reasoning: "check vet", Content: "Let me run vet.", ToolCalls: testToolCalls()}
	ins := NewInsertion(testDraft(), noticeMessage(testPacket()), cont)
	merged := msg("role", "assistant", "name", "coder", "content", MergedContent(testDraft().Content, cont.Content),
		"reasoning_content", "whatever the client kept", "tool_calls", []any{call("call_9", "search", `{"q":"x"}`)})
	msgs := append(agentMessages(), merged, msg("role", "tool", "tool_call_id", "call_9", "content", "vet: 1 issue"))
	req := mustParse(t, requestBody(msgs))
	lookup, _ := lookupOf(ins)
	out, n, err := Restore(req, lookup)
	if err != nil || n != 1 {
		t.Fatalf("restored %d, err %v", n, err)
	}
	got := mustParse(t, out)
	at := len(agentMessages())
	c := got.Messages[at+2]
	if c.Name != "coder" || len(c.ToolCalls) != 1 || c.ToolCalls[0].ID != "call_9" || c.Content != cont.Content || c.Reasoning != "check vet" {
		t.Errorf("continuation %+v", c)
	}
	if got.ToolCallsPending() {
		t.Error("the tool result no longer answers the call")
	}
}

// TestRestoreNoReasoningKey: a client that drops reasoning from history
// gets draft and continuation without it too.
func TestRestoreNoReasoningKey(t *testing.T) {
	ins := NewInsertion(testDraft(), noticeMessage(testPacket()), contDraft)
	merged := msg("role", "assistant", "content", MergedContent(testDraft().Content, contDraft.Content))
	req := mustParse(t, laterRequest(merged))
	lookup, _ := lookupOf(ins)
	out, n, err := Restore(req, lookup)
	if err != nil || n != 1 {
		t.Fatalf("restored %d, err %v", n, err)
	}
	got := mustParse(t, out)
	at := len(agentMessages())
	for _, i := range []int{at, at + 2} {
		if got.Messages[i].HasReasoningKey {
			t.Errorf("message %d has a reasoning key: %s", i, raw(got, i))
		}
	}
}

func TestRestoreBadInsertion(t *testing.T) {
	ins := NewInsertion(testDraft(), []byte(`{not json`), contDraft)
	merged := msg("role", "assistant", "content", MergedContent(testDraft().Content, contDraft.Content))
	req := mustParse(t, laterRequest(merged))
	lookup, _ := lookupOf(ins)
	out, n, err := Restore(req, lookup)
	if err == nil || n != 0 || !bytes.Equal(out, req.Body) {
		t.Errorf("bad insertion: %d restored, err %v", n, err)
	}
}

func TestInsertionKey(t *testing.T) {
	ins := NewInsertion(testDraft(), noticeMessage(testPacket()), contDraft)
	if ins.Key != insertionKey(testDraft().Content+Separator+contDraft.Content) {
		t.Error("key is not the hash of the merged content")
	}
	if gjson.GetBytes(ins.Draft, "reasoning_content").String() != draftReasoning {
		t.Errorf("draft message %s", ins.Draft)
	}
}

func TestTurnKey(t *testing.T) {
	const conversation = "c:0123456789abcdef"
	msgs := agentMessages()
	open := mustParse(t, requestBody(msgs[:4])) // the open turn's first request
	key := TurnKey(open, conversation)
	if key == "" {
		t.Fatal("empty key")
	}
	// Same turn, later requests (the tool loop grows), re-serialized opener.
	for _, n := range []int{6, 9, 11} {
		if got := TurnKey(mustParse(t, requestBody(msgs[:n])), conversation); got != key {
			t.Errorf("request with %d messages: key %s, want %s", n, got, key)
		}
	}
	reser := append(append([]string{}, msgs[:3]...), `{ "content" : "Fix the failing test in calc_test.go.", "role": "user" }`)
	if got := TurnKey(mustParse(t, requestBody(reser)), conversation); got != key {
		t.Error("re-serialized opener changed the key")
	}
	// Another turn, another conversation, no user message.
	next := append(append([]string{}, msgs...), msg("role", "assistant", "content", "done"), msg("role", "user", "content", "Fix the failing test in calc_test.go."))
	if got := TurnKey(mustParse(t, requestBody(next)), conversation); got == key {
		t.Error("a new turn with the same text got the same key")
	}
	if TurnKey(open, "c:other") == key {
		t.Error("another conversation got the same key")
	}
	if k := TurnKey(mustParse(t, []byte(`{"messages":[{"role":"system","content":"s"}]}`)), conversation); k != "" {
		t.Errorf("no user message: key %q", k)
	}
}
