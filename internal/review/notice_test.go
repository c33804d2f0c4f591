package review

import (
	"strings"
	"testing"

	"github.com/tidwall/gjson"
)

func testPacket() Packet {
	return Packet{Role: packetRole, Status: statusUpdate, Items: []Item{
		{Kind: "possible_error", Certainty: "likely", Content: `go vet reported "unreachable code"; the draft says the tests pass.`},
		{Kind: "unknown", Certainty: "uncertain", Content: "The README was not updated."},
	}}
}

func TestNotice(t *testing.T) {
	n := notice(testPacket())
	for _, want := range []string{
		"Automatic masked review by the proxy (not from the user)",
		"your reasoning hidden",
		"1. [possible_error, likely] go vet reported \"unreachable code\"; the draft says the tests pass.\n",
		"2. [unknown, uncertain] The README was not updated.\n",
		"Revise your answer if these hold; otherwise say briefly why not.",
	} {
		if !strings.Contains(n, want) {
			t.Errorf("notice lacks %q:\n%s", want, n)
		}
	}
	if e := notice(Packet{Role: packetRole, Status: statusNoUpdate}); !strings.Contains(e, "found nothing") || strings.Contains(e, "1.") {
		t.Errorf("no_update notice: %s", e)
	}
}

func TestNoticeMessage(t *testing.T) {
	m := noticeMessage(testPacket())
	if !gjson.ValidBytes(m) {
		t.Fatalf("not json: %s", m)
	}
	if r := gjson.GetBytes(m, "role").String(); r != "system" {
		t.Errorf("role %q, want system", r)
	}
	if c := gjson.GetBytes(m, "content").String(); c != notice(testPacket()) {
		t.Errorf("content %q", c)
	}
	// Round trip through the packet parser's own input shape is not the
	// point; the notice must not look like a user message.
	if strings.Contains(string(m), `"role":"user"`) {
		t.Error("notice is a user message")
	}
}

func TestContinuationRequest(t *testing.T) {
	body := requestBody(agentMessages())
	primary := mustParse(t, body)
	notice := noticeMessage(testPacket())
	out, err := continuationRequest(body, testDraft(), notice)
	if err != nil {
		t.Fatal(err)
	}
	got := mustParse(t, out)
	n := len(primary.Messages)
	if len(got.Messages) != n+2 {
		t.Fatalf("%d messages, want %d", len(got.Messages), n+2)
	}
	// Every byte of the primary is kept: the body up to the end of its
	// last message, and everything after it.
	end := primary.Messages[n-1].End
	if string(out[:end]) != string(body[:end]) || string(out[len(out)-(len(body)-end):]) != string(body[end:]) {
		t.Error("primary bytes changed")
	}
	d := got.Messages[n]
	if d.Role != "assistant" || d.Content != testDraft().Content || d.ReasoningField != "reasoning_content" || d.Reasoning != draftReasoning || len(d.ToolCalls) != 0 {
		t.Errorf("draft message %+v", d)
	}
	if raw(got, n+1) != string(notice) {
		t.Errorf("notice message %s", raw(got, n+1))
	}
	if !got.Stream {
		t.Error("stream changed")
	}
	// The continuation stays in the same turn (no new user message).
	before, _ := primary.OpenTurn()
	after, _ := got.OpenTurn()
	if before.Ordinal != after.Ordinal || before.Start != after.Start {
		t.Errorf("open turn moved: %+v -> %+v", before, after)
	}
}

func TestContinuationRequestEdges(t *testing.T) {
	empty := []byte(`{"messages":[ ],"model":"m"}`)
	out, err := continuationRequest(empty, Draft{Content: "x"}, []byte(`{"role":"system","content":"n"}`))
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"messages":[ {"role":"assistant","content":"x"},{"role":"system","content":"n"}],"model":"m"}`; string(out) != want {
		t.Errorf("got  %s\nwant %s", out, want)
	}
	if _, err := continuationRequest(empty, Draft{}, []byte(`"x"`)); err == nil {
		t.Error("notice that is not an object accepted")
	}
	if _, err := continuationRequest([]byte(`{"messages":[],"messages":[]}`), Draft{}, []byte(`{}`)); err == nil {
		t.Error("repeated key accepted")
	}
	// A draft with tool calls keeps them (general case).
	d := Draft{ReasoningField: "reasoning", Reasoning: "r", ToolCalls: testToolCalls()}
	out, err = continuationRequest(empty, d, []byte(`{"role":"system","content":"n"}`))
	if err != nil {
		t.Fatal(err)
	}
	m := mustParse(t, out).Messages[0]
	if m.ReasoningField != "reasoning" || len(m.ToolCalls) != 1 || m.ToolCalls[0].Arguments != `{"q":"x"}` {
		t.Errorf("draft message %+v", m)
	}
}
